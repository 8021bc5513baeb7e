//! Frame Streams, the writer's side of a bidirectional stream (the protocol dnstap
//! travels in: <https://farsightsec.github.io/fstrm/>): READY with our content type,
//! the reader's ACCEPT naming it, START; then data frames (a 32-bit length and the
//! payload); STOP, answered by FINISH. Written here because no well-kept Rust crate
//! does it (`framestream` is a preliminary, unmaintained sketch); it is four control
//! frames and a length prefix.
use std::io::{self, Read, Write};

/// The content type of a dnstap stream.
pub const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";
/// Control frame types.
const ACCEPT: u32 = 1;
const START: u32 = 2;
const STOP: u32 = 3;
const READY: u32 = 4;
const FINISH: u32 = 5;
/// The control field that carries a content type.
const FIELD_CONTENT_TYPE: u32 = 1;
/// Longest control frame read from a reader (it is not authenticated): fstrm's own
/// limit is 512 octets.
const MAX_CONTROL: usize = 512;

/// The control frame of `kind`, with our content type when `typed`.
fn control(kind: u32, typed: bool) -> Vec<u8> {
    let mut body = kind.to_be_bytes().to_vec();
    if typed {
        body.extend_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        body.extend_from_slice(&(CONTENT_TYPE.len() as u32).to_be_bytes());
        body.extend_from_slice(CONTENT_TYPE);
    }
    let mut frame = 0u32.to_be_bytes().to_vec();
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

fn read_u32(from: &mut impl Read) -> io::Result<u32> {
    let mut word = [0u8; 4];
    from.read_exact(&mut word)?;
    Ok(u32::from_be_bytes(word))
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_owned())
}

/// Reads one control frame: its type and whether it names our content type.
fn read_control(from: &mut impl Read) -> io::Result<(u32, bool)> {
    if read_u32(from)? != 0 {
        return Err(invalid("a data frame where a control frame belongs"));
    }
    let len = read_u32(from)? as usize;
    if !(4..=MAX_CONTROL).contains(&len) {
        return Err(invalid("a control frame of a length Frame Streams does not use"));
    }
    let mut body = vec![0u8; len];
    from.read_exact(&mut body)?;
    let kind = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let mut fields = &body[4..];
    let mut ours = false;
    while fields.len() >= 8 {
        let field = u32::from_be_bytes([fields[0], fields[1], fields[2], fields[3]]);
        let flen = u32::from_be_bytes([fields[4], fields[5], fields[6], fields[7]]) as usize;
        let value = fields
            .get(8..8 + flen)
            .ok_or_else(|| invalid("a control field past its frame"))?;
        ours |= field == FIELD_CONTENT_TYPE && value == CONTENT_TYPE;
        fields = &fields[8 + flen..];
    }
    Ok((kind, ours))
}

/// The handshake of a bidirectional stream: READY, the reader's ACCEPT of our content
/// type, START.
///
/// # Errors
/// The reader's silence (the stream's read timeout), another answer, or I/O.
pub fn open<S: Read + Write>(stream: &mut S) -> io::Result<()> {
    stream.write_all(&control(READY, true))?;
    stream.flush()?;
    match read_control(stream)? {
        (ACCEPT, true) => {}
        (ACCEPT, false) => return Err(invalid("the reader does not accept protobuf:dnstap.Dnstap")),
        _ => return Err(invalid("the reader answered READY with something other than ACCEPT")),
    }
    stream.write_all(&control(START, true))?;
    stream.flush()
}

/// Writes one data frame.
///
/// # Errors
/// I/O.
pub fn data(to: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len()).map_err(|_| invalid("a data frame over 4 GiB"))?;
    to.write_all(&len.to_be_bytes())?;
    to.write_all(payload)
}

/// Ends the stream: STOP, then the reader's FINISH (not waited for past the stream's
/// read timeout).
pub fn close<S: Read + Write>(stream: &mut S) {
    if stream
        .write_all(&control(STOP, false))
        .and_then(|()| stream.flush())
        .is_ok()
    {
        let _ = read_control(stream).map(|(kind, _)| kind == FINISH);
    }
}

#[cfg(test)]
mod tests {
    use super::{control, read_control, ACCEPT, READY};

    #[test]
    fn control_frames_read_back_and_bad_ones_are_refused() {
        let ready = control(READY, true);
        // As fstrm_capture logs a writer's READY: 42 octets.
        assert_eq!(ready.len(), 42);
        assert_eq!(&ready[..12], &[0, 0, 0, 0, 0, 0, 0, 34, 0, 0, 0, 4]);
        assert_eq!(read_control(&mut &ready[..]).unwrap(), (READY, true));
        assert_eq!(read_control(&mut &control(ACCEPT, false)[..]).unwrap(), (ACCEPT, false));
        // A data frame, an oversized frame, a field running past its frame.
        assert!(read_control(&mut &[0, 0, 0, 5, 1, 2, 3, 4, 5][..]).is_err());
        assert!(read_control(&mut &[0, 0, 0, 0, 0, 0, 2, 1][..]).is_err());
        let mut bad = control(ACCEPT, true);
        bad[19] = 200;
        assert!(read_control(&mut &bad[..]).is_err());
    }
}
