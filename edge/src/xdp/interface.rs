//! What the kernel says about an interface: its MTU (sysfs) and its driver (ethtool).

/// The interface's MTU, from sysfs.
pub(super) fn interface_mtu(iface: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The driver of `iface` (`ethtool -i`), by the `SIOCETHTOOL`/`ETHTOOL_GDRVINFO` ioctl
/// (libc has no binding for the ethtool structures; these are the kernel's UAPI layouts).
pub(super) fn driver(iface: &str) -> Option<String> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        rest: [u8; 32 * 4 + 12 + 20],
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        data: *mut DrvInfo,
        pad: [u8; 16],
    }
    let name = iface.as_bytes();
    if name.len() >= libc::IFNAMSIZ {
        return None;
    }
    let mut info = DrvInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 32 * 4 + 12 + 20],
    };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &raw mut info,
        pad: [0; 16],
    };
    req.name[..name.len()].copy_from_slice(name);
    // SAFETY: a plain datagram socket, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `req` is a valid ifreq whose data points at a drvinfo the kernel fills.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &raw mut req) };
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return None;
    }
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(info.driver.len());
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn unknown_interface_has_no_driver() {
        // The veth case is checked end to end (edge/tests/xdp_veth.rs: auto → generic).
        assert_eq!(super::driver("qdns-none0"), None);
    }
}
