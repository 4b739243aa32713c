//! A trainer's own network namespace: made by `unshare(CLONE_NEWNET)`
//! between fork and exec, holding only a loopback interface, which is
//! brought up so a trainer can still talk to itself (for instance a
//! distributed trainer's processes among themselves).

use std::io;

/// Moves the calling process into a new network namespace and brings its
/// loopback up. Async-signal-safe: only system calls.
pub fn isolate() -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    loopback_up()
}

/// `ip link set lo up`, with the SIOCGIFFLAGS/SIOCSIFFLAGS ioctls.
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket returns a new descriptor or -1.
    let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if socket < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data; zero is a valid value for every field.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: the ioctls read and write `request`, which outlives them.
    let result = unsafe {
        if libc::ioctl(socket, libc::SIOCGIFFLAGS, &mut request) != 0 {
            Err(io::Error::last_os_error())
        } else {
            request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(socket, libc::SIOCSIFFLAGS, &request) != 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: closing the descriptor made above.
    unsafe { libc::close(socket) };
    result
}
