//! Who and where: users and groups by name and id (`getgrnam_r`, `getpwuid_r`) — the
//! group a daemon gives its Unix sockets (`--socket-group`), the user named beside a
//! change in the timeline — through libc so NSS (LDAP, sssd) answers as it does for
//! `ls -l`; and the host's name (`gethostname`), which needs no `/proc/sys` (the units
//! hide it with `ProcSubset=pid`).
use std::ffi::{CStr, CString};

/// Scratch for one lookup: group lists can be long; past this the lookup fails.
const BUFFER: usize = 64 * 1024;

/// The id of the group `name`.
pub fn group_id(name: &str) -> std::io::Result<u32> {
    let not_found = || std::io::Error::new(std::io::ErrorKind::NotFound, format!("no group named `{name}`"));
    let c_name = CString::new(name).map_err(|_| not_found())?;
    // SAFETY: an all-zero `group` is a valid value (null pointers, gid 0) that
    // getgrnam_r overwrites.
    let mut group: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    let mut buffer = vec![0 as libc::c_char; BUFFER];
    // SAFETY: every pointer is to a live local or to `buffer`, whose length is passed;
    // getgrnam_r writes only within them and sets `result` to `&group` or null.
    let rc = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &raw mut group,
            buffer.as_mut_ptr(),
            buffer.len(),
            &raw mut result,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Err(not_found());
    }
    Ok(group.gr_gid)
}

/// The name of user `uid`, if it has one.
#[must_use]
pub fn user_name(uid: u32) -> Option<String> {
    // SAFETY: an all-zero `passwd` is a valid value (null pointers, zero ids) that
    // getpwuid_r overwrites.
    let mut passwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let mut buffer = vec![0 as libc::c_char; BUFFER];
    // SAFETY: as in `group_id`.
    let rc = unsafe { libc::getpwuid_r(uid, &raw mut passwd, buffer.as_mut_ptr(), buffer.len(), &raw mut result) };
    if rc != 0 || result.is_null() || passwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string inside `buffer`,
    // which is alive here.
    let name = unsafe { CStr::from_ptr(passwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// This host's name (the name a daemon shows itself by unless told one), or `fallback`.
#[must_use]
pub fn host_name(fallback: &str) -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` octets into the local buffer.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match std::str::from_utf8(&buffer[..end]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_owned(),
        _ => fallback.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{group_id, host_name, user_name};

    #[test]
    fn root_is_known_and_nonsense_is_not() {
        assert_eq!(group_id("root").unwrap(), 0);
        assert_eq!(user_name(0).as_deref(), Some("root"));
        let err = group_id("qdns-no-such-group").unwrap_err();
        assert!(err.to_string().contains("no group named `qdns-no-such-group`"), "{err}");
        assert!(group_id("a\0b").is_err());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(host_name("x"), kernel.trim());
    }
}
