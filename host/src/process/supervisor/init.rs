//! The first process of a trainer's PID namespace: it forks the trainer,
//! reaps every process the namespace's orphans leave to it, and when the
//! trainer ends, passes the trainer's wait status to the supervisor on a
//! pipe and exits — which makes the kernel kill whatever is left in the
//! namespace.
//!
//! The trainer is not the first process itself because that one is
//! special: the kernel delivers it no signal it has no handler for (a
//! trainer without a SIGTERM handler would ignore the host's `stop`), and
//! orphans are its to reap. This process has no handler for anything, so
//! SIGTERM sent to the trainer's process group reaches the trainer and
//! passes it by; SIGKILL from the supervisor ends it and the namespace.
//! It stays the host's user but holds nothing: no descriptor but the
//! pipe, no memory the trainer can reach, and the trainer (another user,
//! under Landlock and the system-call filter) can neither signal nor
//! trace it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Where the first process writes the trainer's wait status.
pub(crate) struct StatusPipe {
    read: OwnedFd,
    write: Option<OwnedFd>,
}

impl StatusPipe {
    pub(crate) fn new() -> io::Result<StatusPipe> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just made and are owned only here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(StatusPipe {
            read,
            write: Some(write),
        })
    }

    /// The end the first process writes to (close-on-exec: the trainer
    /// never has it).
    pub(crate) fn write_end(&self) -> RawFd {
        self.write.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// Closes the supervisor's copy of the write end, once the first
    /// process has its own.
    pub(crate) fn close_write_end(&mut self) {
        self.write = None;
    }

    /// The trainer's wait status, once the first process has ended; `None`
    /// if it was killed before the trainer ended.
    pub(crate) fn trainer_status(&self) -> Option<libc::c_int> {
        let mut status = [0u8; 4];
        // SAFETY: reads at most 4 bytes into `status`.
        let n = unsafe { libc::read(self.read.as_raw_fd(), status.as_mut_ptr().cast(), 4) };
        (n == 4).then(|| libc::c_int::from_ne_bytes(status))
    }
}

/// In the namespace's first process, between fork and exec: forks. The
/// child (the trainer) returns to go on to its exec; this process becomes
/// the namespace's init and never returns. System calls only.
pub(crate) fn become_init(status: RawFd) -> io::Result<()> {
    // SAFETY: the supervisor runs no other thread, so nothing is held
    // locked in this process; the child goes on to exec.
    let trainer = unsafe { libc::fork() };
    if trainer < 0 {
        return Err(io::Error::last_os_error());
    }
    if trainer == 0 {
        return Ok(());
    }
    // SAFETY: from here on only system calls, ending in _exit. Every other
    // descriptor is closed, including the one std's spawn waits on, so the
    // supervisor hears of the trainer's exec (or its failure) alone.
    unsafe {
        if status > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (status - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (status + 1) as u32, u32::MAX, 0u32);
        loop {
            let mut wait_status: libc::c_int = 0;
            let ended = libc::waitpid(-1, &mut wait_status, libc::__WALL);
            if ended == trainer {
                let bytes = wait_status.to_ne_bytes();
                libc::write(status, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
            if ended < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                libc::_exit(0);
            }
        }
    }
}
