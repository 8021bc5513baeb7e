//! Hand-assembled XDP programs for the harness (the driver's floor, the reply sink):
//! encoded here, loaded with `bpf(2)` and attached by a link inside another network
//! namespace. Nothing to build for BPF, and nothing a compiler could add to what they
//! measure; each is a few dozen instructions with one exit for "pass".
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::mpsc,
    thread::JoinHandle,
};

pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;
pub const XDP_TX: i32 = 3;
const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;
const BPF_PROG_TYPE_XDP: u64 = 6;
/// `BPF_XDP`, the link's attach type.
const BPF_XDP: u64 = 37;
const XDP_FLAGS_SKB_MODE: u64 = 2;
const XDP_FLAGS_DRV_MODE: u64 = 4;

/// The opcodes the programs use.
pub mod op {
    pub const LDXW: u8 = 0x61;
    pub const LDXH: u8 = 0x69;
    pub const LDXB: u8 = 0x71;
    pub const STXW: u8 = 0x63;
    pub const STXH: u8 = 0x6b;
    pub const STXB: u8 = 0x73;
    pub const STH: u8 = 0x6a;
    pub const STB: u8 = 0x72;
    pub const MOV64_X: u8 = 0xbf;
    pub const MOV64_K: u8 = 0xb7;
    pub const ADD64_K: u8 = 0x07;
    pub const OR64_K: u8 = 0x47;
    pub const JGT_X: u8 = 0x2d;
    pub const JNE_K: u8 = 0x55;
    pub const EXIT: u8 = 0x95;
}

/// One BPF instruction.
pub fn insn(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(op)
        | u64::from(dst) << 8
        | u64::from(src) << 12
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// The checks both programs start with: `r2` = data, `r3` = data end, at least `octets`
/// octets of frame (else pass), an untagged IPv4 frame with a 20-octet header carrying
/// UDP (else pass). Each instruction with whether it jumps to the pass exit.
pub fn ipv4_udp_checks(octets: i32) -> Vec<(u64, bool)> {
    use op::{ADD64_K, JGT_X, JNE_K, LDXB, LDXH, LDXW, MOV64_X};
    vec![
        (insn(LDXW, 2, 1, 0, 0), false), // r2 = data
        (insn(LDXW, 3, 1, 4, 0), false), // r3 = data_end
        (insn(MOV64_X, 4, 2, 0, 0), false),
        (insn(ADD64_K, 4, 0, 0, octets), false),
        (insn(JGT_X, 4, 3, 0, 0), true),
        (insn(LDXH, 5, 2, 12, 0), false), // EtherType 0x0800, read little-endian
        (insn(JNE_K, 5, 0, 0, 0x0008), true),
        (insn(LDXB, 5, 2, 14, 0), false), // IPv4, 20-octet header
        (insn(JNE_K, 5, 0, 0, 0x45), true),
        (insn(LDXB, 5, 2, 23, 0), false), // UDP
        (insn(JNE_K, 5, 0, 0, 17), true),
    ]
}

/// `code` (each instruction with whether it jumps to the pass exit) followed by the pass
/// exit (`r0 = XDP_PASS; exit`), the jumps' offsets filled in.
pub fn with_pass_exit(mut code: Vec<(u64, bool)>) -> Vec<u64> {
    code.push((insn(op::MOV64_K, 0, 0, 0, XDP_PASS), false));
    code.push((insn(op::EXIT, 0, 0, 0, 0), false));
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

/// Loads `insns` as an XDP program; the verifier's log on refusal.
fn load(name: &str, insns: &[u64]) -> Result<OwnedFd, String> {
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
        format!("{name} program: {e}: {}", String::from_utf8_lossy(&log[..end]))
    })?;
    // SAFETY: the kernel returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A program attached to an interface in another namespace; dropping it detaches it.
pub struct Attached {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Attached {
    /// Attaches `insns` (named `name` in errors) to `iface` in the namespace `netns`,
    /// natively or in generic mode, through a link held by a thread that entered the
    /// namespace.
    pub fn attach(
        name: &'static str,
        insns: Vec<u64>,
        (netns, iface): (&str, &str),
        native: bool,
    ) -> Result<Attached, String> {
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
                let program = load(name, &insns)?;
                let mut attr = [0u64; 16];
                attr[0] = program.as_raw_fd() as u64 | u64::from(index) << 32;
                attr[1] = BPF_XDP | if native { XDP_FLAGS_DRV_MODE } else { XDP_FLAGS_SKB_MODE } << 32;
                let link = bpf(BPF_LINK_CREATE, &mut attr).map_err(|e| format!("{name} link: {e}"))?;
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
            .map_err(|_| format!("the {name} program's thread ended"))??;
        Ok(Attached {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Attached {
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
        // The floor is 38 instructions, the sink 17.
        assert_eq!(super::super::floor::program(53).len(), 38);
        assert_eq!(super::super::sink::program(53).len(), 17);
        for code in [super::super::floor::program(53), super::super::sink::program(53)] {
            let pass = code.len() - 2;
            assert_eq!(code[pass], insn(op::MOV64_K, 0, 0, 0, XDP_PASS));
            for (i, &insn) in code.iter().enumerate() {
                let op = insn as u8;
                if op == op::JGT_X || op == op::JNE_K {
                    let off = (insn >> 16) as u16 as usize;
                    assert_eq!(i + 1 + off, pass, "instruction {i}");
                }
            }
        }
    }
}
