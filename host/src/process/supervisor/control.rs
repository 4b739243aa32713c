//! The supervisor's end of the control socket, inherited from the host as
//! file descriptor 3.

use crate::process::wire::{HostMessage, Report, WireError};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// The descriptor the host passes the control socket as.
pub const CONTROL_FD: i32 = 3;

/// Why the control socket cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("file descriptor 3 is not a socket; trainyard-supervise is started by the trainyard host, which passes its control socket there")]
    NotASocket,
    #[error("the host closed the control socket")]
    Closed,
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    #[error("the host sent a malformed control message: {0}")]
    Malformed(#[from] WireError),
}

/// Reads host messages and writes reports on file descriptor 3.
pub(crate) struct ControlSocket {
    stream: UnixStream,
    /// Bytes of a message not yet complete.
    pending: Vec<u8>,
}

impl ControlSocket {
    /// Takes ownership of file descriptor 3 and makes it close-on-exec, so the
    /// trainer never inherits it (the host cleared the flag only to pass it to
    /// this process).
    pub(crate) fn from_fd3() -> Result<Self, ControlError> {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat only writes into `stat`, and fails cleanly (EBADF) if
        // fd 3 is not open.
        if unsafe { libc::fstat(CONTROL_FD, stat.as_mut_ptr()) } != 0 {
            return Err(ControlError::NotASocket);
        }
        // SAFETY: fstat succeeded, so it filled `stat` in.
        let stat = unsafe { stat.assume_init() };
        if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(ControlError::NotASocket);
        }
        // SAFETY: fd 3 is open (fstat succeeded) and nothing else in this
        // process owns it: it was inherited and is taken here exactly once.
        let fd = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
        nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(io::Error::from)?;
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

    pub(crate) fn send(&mut self, report: &Report) -> io::Result<()> {
        self.stream.write_all(&report.encode())
    }

    fn fill(&mut self) -> Result<(), ControlError> {
        let mut chunk = [0u8; 512];
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
