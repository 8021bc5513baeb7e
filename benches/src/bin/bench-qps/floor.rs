//! The driver's floor (issue 31 §4): a bench-only XDP responder that does no DNS work.
//! It checks the frame is an untagged IPv4 UDP datagram (no IP options) to the DNS
//! port, swaps the MAC and IP addresses and the ports, marks the message a response
//! (QR and AA set, RCODE 3; the question echoed, nothing added or removed), zeroes the
//! UDP checksum (IPv4 allows it: swapping addresses and ports leaves the IP checksum as
//! it was) and sends the frame back with `XDP_TX`; everything else passes. The harness
//! measures it like the servers, on the same veth, native and generic: what answering
//! costs there before any DNS work, which each server's figures divide by.
//!
//! Hand-assembled (38 instructions): nothing to build for BPF, and nothing a compiler
//! could add to the floor.
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::mpsc,
    thread::JoinHandle,
};

const XDP_PASS: i32 = 2;
const XDP_TX: i32 = 3;
const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;
const BPF_PROG_TYPE_XDP: u64 = 6;
/// `BPF_XDP`, the link's attach type.
const BPF_XDP: u64 = 37;
const XDP_FLAGS_SKB_MODE: u64 = 2;
const XDP_FLAGS_DRV_MODE: u64 = 4;

/// One BPF instruction.
fn insn(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(op)
        | u64::from(dst) << 8
        | u64::from(src) << 12
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// The responder for UDP port `port`.
fn program(port: u16) -> Vec<u64> {
    const LDXW: u8 = 0x61;
    const LDXH: u8 = 0x69;
    const LDXB: u8 = 0x71;
    const STXW: u8 = 0x63;
    const STXH: u8 = 0x6b;
    const STXB: u8 = 0x73;
    const STH: u8 = 0x6a;
    const STB: u8 = 0x72;
    const MOV64_X: u8 = 0xbf;
    const MOV64_K: u8 = 0xb7;
    const ADD64_K: u8 = 0x07;
    const OR64_K: u8 = 0x47;
    const JGT_X: u8 = 0x2d;
    const JNE_K: u8 = 0x55;
    const EXIT: u8 = 0x95;
    // (instruction, jumps to the pass exit)
    let code: Vec<(u64, bool)> = vec![
        (insn(LDXW, 2, 1, 0, 0), false), // r2 = data
        (insn(LDXW, 3, 1, 4, 0), false), // r3 = data_end
        (insn(MOV64_X, 4, 2, 0, 0), false),
        (insn(ADD64_K, 4, 0, 0, 46), false), // through the DNS flags
        (insn(JGT_X, 4, 3, 0, 0), true),
        (insn(LDXH, 5, 2, 12, 0), false), // EtherType 0x0800, read little-endian
        (insn(JNE_K, 5, 0, 0, 0x0008), true),
        (insn(LDXB, 5, 2, 14, 0), false), // IPv4, 20-octet header
        (insn(JNE_K, 5, 0, 0, 0x45), true),
        (insn(LDXB, 5, 2, 23, 0), false), // UDP
        (insn(JNE_K, 5, 0, 0, 17), true),
        (insn(LDXH, 5, 2, 36, 0), false), // destination port
        (insn(JNE_K, 5, 0, 0, i32::from(port.swap_bytes())), true),
        (insn(LDXW, 5, 2, 0, 0), false), // MAC addresses
        (insn(LDXW, 6, 2, 6, 0), false),
        (insn(STXW, 2, 6, 0, 0), false),
        (insn(STXW, 2, 5, 6, 0), false),
        (insn(LDXH, 5, 2, 4, 0), false),
        (insn(LDXH, 6, 2, 10, 0), false),
        (insn(STXH, 2, 6, 4, 0), false),
        (insn(STXH, 2, 5, 10, 0), false),
        (insn(LDXW, 5, 2, 26, 0), false), // IP addresses
        (insn(LDXW, 6, 2, 30, 0), false),
        (insn(STXW, 2, 6, 26, 0), false),
        (insn(STXW, 2, 5, 30, 0), false),
        (insn(LDXH, 5, 2, 34, 0), false), // ports
        (insn(LDXH, 6, 2, 36, 0), false),
        (insn(STXH, 2, 6, 34, 0), false),
        (insn(STXH, 2, 5, 36, 0), false),
        (insn(STH, 2, 0, 40, 0), false),  // no UDP checksum
        (insn(LDXB, 5, 2, 44, 0), false), // QR, AA
        (insn(OR64_K, 5, 0, 0, 0x84), false),
        (insn(STXB, 2, 5, 44, 0), false),
        (insn(STB, 2, 0, 45, 3), false), // RCODE 3
        (insn(MOV64_K, 0, 0, 0, XDP_TX), false),
        (insn(EXIT, 0, 0, 0, 0), false),
        (insn(MOV64_K, 0, 0, 0, XDP_PASS), false),
        (insn(EXIT, 0, 0, 0, 0), false),
    ];
    let pass = code.len() - 2;
    code.iter()
        .enumerate()
        .map(|(i, &(insn, jump))| {
            if jump {
                // The offset counts from the next instruction.
                let off = (pass - i - 1) as u64;
                insn & !(0xffff << 16) | off << 16
            } else {
                insn
            }
        })
        .collect()
}

/// `bpf(2)` with an attribute block of 16 words.
fn bpf(cmd: i64, attr: &mut [u64; 16]) -> Result<i64, String> {
    // SAFETY: `attr` is a zero-padded attribute block as large as any command here reads.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(rc)
}

/// Loads the responder; the verifier's log on refusal.
fn load(port: u16) -> Result<OwnedFd, String> {
    let insns = program(port);
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = [0u64; 16];
    attr[0] = BPF_PROG_TYPE_XDP | (insns.len() as u64) << 32;
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    // log_level 1, log_size, log_buf
    attr[3] = 1 | (log.len() as u64) << 32;
    attr[4] = log.as_mut_ptr() as u64;
    // expected_attach_type: BPF_XDP, as a link to a device wants.
    attr[8] = BPF_XDP << 32;
    let fd = bpf(BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        format!("floor program: {e}: {}", String::from_utf8_lossy(&log[..end]))
    })?;
    // SAFETY: the kernel returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The responder attached to an interface in another namespace; dropping it detaches it.
pub struct Floor {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Floor {
    /// Attaches the responder for `port` to `iface` in the namespace `netns`, natively or
    /// in generic mode, through a link held by a thread that entered the namespace.
    pub fn attach(netns: &str, iface: &str, port: u16, native: bool) -> Result<Floor, String> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (ready, attached) = mpsc::channel::<Result<(), String>>();
        let path = format!("/var/run/netns/{netns}");
        let iface = std::ffi::CString::new(iface).map_err(|e| e.to_string())?;
        let thread = std::thread::spawn(move || {
            let linked = (|| -> Result<(OwnedFd, OwnedFd), String> {
                let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
                // SAFETY: setns affects this thread only; the namespace file is open.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
                }
                // SAFETY: a NUL-terminated name.
                let index = unsafe { libc::if_nametoindex(iface.as_ptr()) };
                if index == 0 {
                    return Err(format!("{iface:?}: no such interface"));
                }
                let program = load(port)?;
                let mut attr = [0u64; 16];
                attr[0] = program.as_raw_fd() as u64 | u64::from(index) << 32;
                attr[1] = BPF_XDP | if native { XDP_FLAGS_DRV_MODE } else { XDP_FLAGS_SKB_MODE } << 32;
                let link = bpf(BPF_LINK_CREATE, &mut attr).map_err(|e| format!("floor link: {e}"))?;
                // SAFETY: the kernel returned a new descriptor we own.
                Ok((program, unsafe { OwnedFd::from_raw_fd(link as i32) }))
            })();
            match linked {
                Ok(held) => {
                    let _ = ready.send(Ok(()));
                    let _ = stopped.recv();
                    drop(held);
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                }
            }
        });
        attached
            .recv()
            .map_err(|_| "the floor program's thread ended".to_string())??;
        Ok(Floor {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_the_pass_exit() {
        let code = program(53);
        let pass = code.len() - 2;
        for (i, &insn) in code.iter().enumerate() {
            let op = insn as u8;
            if op == 0x2d || op == 0x55 {
                let off = (insn >> 16) as u16 as usize;
                assert_eq!(i + 1 + off, pass, "instruction {i}");
            }
        }
    }
}
