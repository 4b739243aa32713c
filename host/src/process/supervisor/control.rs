//! The supervisor's end of the control socket, inherited from the host as
//! standard input (file descriptor 0).
//!
//! Standard input, because the host can hand it over without running code
//! between `fork` and `exec`: with no such hook, the host's process spawn is
//! a `posix_spawn` (`vfork`-like), which does not copy the page tables of a
//! large, busy host or make its memory copy-on-write while the child starts.

use crate::process::wire::{HostMessage, LaunchOrder, Report, WireError};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// The descriptor the host passes the control socket as: standard input.
pub const CONTROL_FD: i32 = 0;

/// Why the control socket cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("standard input is not a socket; trainyard-supervise is started by the trainyard host, which passes its control socket there")]
    NotASocket,
    #[error("the host closed the control socket")]
    Closed,
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    #[error("the host sent a malformed control message: {0}")]
    Malformed(#[from] WireError),
}

/// Reads host messages and writes reports on the control socket.
pub(crate) struct ControlSocket {
    stream: UnixStream,
    /// Bytes of a message not yet complete.
    pending: Vec<u8>,
}

impl ControlSocket {
    /// Takes the socket from standard input: moves it to a close-on-exec
    /// descriptor, so the trainer never inherits it, and puts `/dev/null` on
    /// standard input in its place, which the trainer inherits.
    pub(crate) fn from_stdin() -> Result<Self, ControlError> {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat only writes into `stat`, and fails cleanly (EBADF) if
        // the descriptor is not open.
        if unsafe { libc::fstat(CONTROL_FD, stat.as_mut_ptr()) } != 0 {
            return Err(ControlError::NotASocket);
        }
        // SAFETY: fstat succeeded, so it filled `stat` in.
        let stat = unsafe { stat.assume_init() };
        if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(ControlError::NotASocket);
        }
        // SAFETY: F_DUPFD_CLOEXEC on an open descriptor (fstat succeeded)
        // returns a new one, which nothing else owns.
        let moved = unsafe { libc::fcntl(CONTROL_FD, libc::F_DUPFD_CLOEXEC, 3) };
        if moved < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: `moved` was just created and is owned only here.
        let fd = unsafe { OwnedFd::from_raw_fd(moved) };
        let null = std::fs::File::open("/dev/null")?;
        // SAFETY: dup2 onto standard input, which this process owns; the
        // socket lives on in `fd`.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), CONTROL_FD) } < 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Self {
            stream: UnixStream::from(fd),
            pending: Vec::new(),
        })
    }

    /// Blocks until the host's first message, which must be the lease deadline.
    pub(crate) fn read_first(&mut self) -> Result<HostMessage, ControlError> {
        loop {
            if let Some(message) = self.next_buffered()? {
                return Ok(message);
            }
            self.fill()?;
        }
    }

    /// Reads what the socket holds (call when poll says it is readable) and
    /// returns the complete messages.
    pub(crate) fn read_ready(&mut self) -> Result<Vec<HostMessage>, ControlError> {
        self.fill()?;
        let mut messages = Vec::new();
        while let Some(message) = self.next_buffered()? {
            messages.push(message);
        }
        Ok(messages)
    }

    /// Blocks until the host's launch order (a prepared sandbox's one
    /// message) has come whole.
    pub(crate) fn read_launch(&mut self) -> Result<LaunchOrder, ControlError> {
        loop {
            if let Some((order, used)) = LaunchOrder::decode(&self.pending)? {
                self.pending.drain(..used);
                return Ok(order);
            }
            self.fill()?;
        }
    }

    pub(crate) fn send(&mut self, report: &Report) -> io::Result<()> {
        self.stream.write_all(&report.encode())
    }

    fn fill(&mut self) -> Result<(), ControlError> {
        let mut chunk = [0u8; 16384];
        let n = loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Err(ControlError::Closed);
        }
        self.pending.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    fn next_buffered(&mut self) -> Result<Option<HostMessage>, ControlError> {
        match HostMessage::decode(&self.pending)? {
            Some((message, used)) => {
                self.pending.drain(..used);
                Ok(Some(message))
            }
            None => Ok(None),
        }
    }
}

impl AsFd for ControlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}
