//! Splitting a master file into entries and tokens (RFC 1035 §5.1).
//!
//! Hand-written rather than hickory-proto's reader: that one decodes `\DDD` as a Unicode
//! code point (so `\200` became two UTF-8 octets), reports no line numbers and refuses
//! escaped octets in labels. Here a token keeps its raw bytes, escapes included — whether
//! `\.` is a dot inside a label or `\DDD` one octet is for the field's decoder to say — and
//! every entry knows its first line.

/// One field of an entry, as written (escapes not decoded, quotes removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Token<'a> {
    /// The raw octets between the delimiters.
    pub text: &'a [u8],
    /// True when it was a `"…"` string.
    pub quoted: bool,
}

/// One entry: a directive or a resource record, parentheses joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry<'a> {
    /// 1-based line where it starts.
    pub line: usize,
    /// True when the line starts with a blank: the owner is the previous entry's.
    pub blank_owner: bool,
    /// Its fields.
    pub tokens: Vec<Token<'a>>,
}

/// Where a piece's unread rest starts ([`Lexer::rest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cut {
    /// Its first octet in the piece.
    pub pos: usize,
    /// The line it starts on.
    pub line: usize,
    /// The line of the `(` left open (the line after the piece when none is).
    pub open: usize,
}

/// A lexical error: the line and what is wrong.
pub(super) type LexError = (usize, String);

/// Entries of a master file, one at a time: of the whole text, or of a piece of it
/// that ends after a newline (a file read in pieces, [`Lexer::piece`]).
pub(super) struct Lexer<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
    /// The text ends where the file does: a `(` still open there is an error. Else the
    /// entry it opened is left for the next piece ([`Lexer::rest`]).
    last: bool,
    /// Where an entry the piece cut stands: its first octet and line, and the line of
    /// its first `(`.
    cut: Option<Cut>,
    /// A finished entry's token list, given back by [`Lexer::recycle`] for the next
    /// entry: one list grown once rather than one allocated per line (a million-line
    /// file spent a tenth of its load growing them).
    spare: Vec<Token<'a>>,
}

impl<'a> Lexer<'a> {
    /// Entries of a whole file's `text`.
    pub(super) fn new(text: &'a [u8]) -> Lexer<'a> {
        Lexer::piece(text, 1, true)
    }

    /// Entries of `text`, a piece of a file starting at the start of `line` and ending
    /// after a newline or (`last`) where the file ends.
    pub(super) fn piece(text: &'a [u8], line: usize, last: bool) -> Lexer<'a> {
        Lexer {
            text,
            pos: 0,
            line,
            last,
            cut: None,
            spare: Vec::new(),
        }
    }

    /// Where the next piece starts once [`Lexer::next_entry`] has returned `None`: the
    /// first octet not read (the end, or the start of an entry whose `(` is not closed
    /// in this piece) and its line.
    pub(super) fn rest(&self) -> Cut {
        self.cut.unwrap_or(Cut {
            pos: self.pos,
            line: self.line,
            open: self.line,
        })
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// The next entry with at least one token; `None` at the end of the text.
    pub(super) fn next_entry(&mut self) -> Result<Option<Entry<'a>>, LexError> {
        loop {
            if self.pos >= self.text.len() {
                return Ok(None);
            }
            let (start, line) = (self.pos, self.line);
            let blank_owner = matches!(self.peek(), Some(b' ' | b'\t'));
            let tokens = self.entry_tokens()?;
            if let Some(cut) = &mut self.cut {
                (cut.pos, cut.line) = (start, line);
                return Ok(None);
            }
            if !tokens.is_empty() {
                return Ok(Some(Entry {
                    line,
                    blank_owner,
                    tokens,
                }));
            }
        }
    }

    /// Takes back `entry`'s token list for the next entry.
    pub(super) fn recycle(&mut self, entry: Entry<'a>) {
        self.spare = entry.tokens;
    }

    /// Tokens up to the newline that ends the entry (outside parentheses).
    fn entry_tokens(&mut self) -> Result<Vec<Token<'a>>, LexError> {
        let mut tokens = std::mem::take(&mut self.spare);
        tokens.clear();
        let mut open_at: Option<usize> = None;
        let mut depth = 0u32;
        while let Some(byte) = self.peek() {
            match byte {
                b'\n' => {
                    self.pos += 1;
                    self.line += 1;
                    if depth == 0 {
                        return Ok(tokens);
                    }
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b';' => {
                    while self.peek().is_some_and(|b| b != b'\n') {
                        self.pos += 1;
                    }
                }
                b'(' => {
                    depth += 1;
                    open_at.get_or_insert(self.line);
                    self.pos += 1;
                }
                b')' => {
                    if depth == 0 {
                        return Err((self.line, "')' without a matching '('".to_owned()));
                    }
                    depth -= 1;
                    self.pos += 1;
                }
                b'"' => tokens.push(self.quoted()?),
                _ => tokens.push(self.word()?),
            }
        }
        if depth > 0 && !self.last {
            self.cut = Some(Cut {
                pos: 0,
                line: 0,
                open: open_at.unwrap_or(self.line),
            });
            return Ok(tokens);
        }
        if depth > 0 {
            return Err((
                open_at.unwrap_or(self.line),
                "'(' is never closed before the end of the file".to_owned(),
            ));
        }
        Ok(tokens)
    }

    /// A `"…"` string on one line; `\` escapes the next octet.
    fn quoted(&mut self) -> Result<Token<'a>, LexError> {
        self.pos += 1;
        let start = self.pos;
        while let Some(byte) = self.peek() {
            match byte {
                b'"' => {
                    let text = self.text.get(start..self.pos).unwrap_or_default();
                    self.pos += 1;
                    return Ok(Token { text, quoted: true });
                }
                b'\\' => self.escape()?,
                b'\n' => break,
                _ => self.pos += 1,
            }
        }
        Err((self.line, "a quoted string is not closed on its line".to_owned()))
    }

    /// A run of octets up to a blank, `;`, a parenthesis, a quote or the line's end.
    fn word(&mut self) -> Result<Token<'a>, LexError> {
        let start = self.pos;
        while let Some(byte) = self.peek() {
            match byte {
                b' ' | b'\t' | b'\r' | b'\n' | b';' | b'(' | b')' | b'"' => break,
                b'\\' => self.escape()?,
                _ => self.pos += 1,
            }
        }
        Ok(Token {
            text: self.text.get(start..self.pos).unwrap_or_default(),
            quoted: false,
        })
    }

    /// Steps over `\` and the octet it escapes (`\DDD` is decoded later).
    fn escape(&mut self) -> Result<(), LexError> {
        match self.text.get(self.pos + 1) {
            Some(b'\n' | b'\r') | None => Err((self.line, "'\\' at the end of a line".to_owned())),
            Some(_) => {
                self.pos += 2;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(text: &str) -> Vec<(usize, bool, Vec<String>)> {
        let mut lexer = Lexer::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(entry) = lexer.next_entry().unwrap() {
            let tokens = entry
                .tokens
                .iter()
                .map(|t| {
                    let s = String::from_utf8_lossy(t.text).into_owned();
                    if t.quoted {
                        format!("\"{s}\"")
                    } else {
                        s
                    }
                })
                .collect();
            out.push((entry.line, entry.blank_owner, tokens));
        }
        out
    }

    #[test]
    fn entries_tokens_lines() {
        let text = "; comment\n\n$TTL 300\nwww IN A 192.0.2.1 ; trailing\n  IN TXT \"a b\" \"c\\\"d\"\n\
                    @ SOA ns ( h 1\n 2 3 4 ; x\n 5 )\nsp\\032ace\\.x TXT x\\;y\n";
        let got = entries(text);
        assert_eq!(got[0], (3, false, vec!["$TTL".into(), "300".into()]));
        assert_eq!(got[1].2, ["www", "IN", "A", "192.0.2.1"]);
        assert_eq!(
            got[2],
            (
                5,
                true,
                vec!["IN".into(), "TXT".into(), "\"a b\"".into(), "\"c\\\"d\"".into()]
            )
        );
        assert_eq!(got[3].0, 6);
        assert_eq!(got[3].2, ["@", "SOA", "ns", "h", "1", "2", "3", "4", "5"]);
        assert_eq!(
            got[4],
            (9, false, vec!["sp\\032ace\\.x".into(), "TXT".into(), "x\\;y".into()])
        );
    }

    #[test]
    fn errors_name_their_line() {
        let err = |text: &str| {
            let mut lexer = Lexer::new(text.as_bytes());
            loop {
                match lexer.next_entry() {
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("no error in {text:?}"),
                    Err(e) => return e,
                }
            }
        };
        assert_eq!(err("a A 1.2.3.4\nb TXT \"open\n").0, 2);
        assert_eq!(err("a A 1.2.3.4\n\nb SOA ( x\ny\n").0, 3);
        assert_eq!(err("a A )\n").0, 1);
        assert_eq!(err("a TXT x\\").0, 1);
    }
}
