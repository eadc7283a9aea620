//! Newline-delimited framing, for both ends of a stdio connection: the stdio wire reads a
//! server's stdout with it, and the proxy's stdio face its client's stdin; [`one_line`] makes
//! a message fit on one line before it is written.
//!
//! It owns only where a line ends: it never parses, trims or re-encodes what is between the
//! line breaks (a `\r` before a `\n` stays in the line, as JSON whitespace). It does no I/O of
//! its own. tokio-util's delimiter codecs test every byte against a set; this one looks for
//! the line break with `memchr`, which the profile of the stdio path asked for.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// Splits a byte stream into lines (without their `\n`), each at most `max` bytes.
///
/// A longer line is an error once, [`LineError::TooLong`], and is then skipped up to its line
/// break; the lines after it are read as usual. What is left at the end of the stream without
/// a line break is a last line.
#[derive(Debug, Clone)]
pub struct LineCodec {
    max: usize,
    /// Where to look for the next line break: everything before it was looked at already.
    next: usize,
    /// Skipping the rest of a line that was too long.
    discarding: bool,
}

/// Why no line could be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// A line was longer than the codec's `max`; it is skipped.
    #[error("a line is longer than the limit")]
    TooLong,
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl LineCodec {
    /// A codec for lines of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            next: 0,
            discarding: false,
        }
    }
}

impl Decoder for LineCodec {
    type Item = BytesMut;
    type Error = LineError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BytesMut>, LineError> {
        loop {
            // A line of `max` bytes has its break at `max` at the latest.
            let end = match self.discarding {
                true => buf.len(),
                false => buf.len().min(self.max.saturating_add(1)),
            };
            let found = memchr::memchr(b'\n', &buf[self.next.min(end)..end]);
            match found {
                Some(offset) => {
                    let at = self.next + offset;
                    self.next = 0;
                    if self.discarding {
                        buf.advance(at + 1);
                        self.discarding = false;
                        continue;
                    }
                    let mut line = buf.split_to(at + 1);
                    line.truncate(at);
                    return Ok(Some(line));
                }
                None if self.discarding => {
                    buf.clear();
                    self.next = 0;
                    return Ok(None);
                }
                None if buf.len() > self.max => {
                    // The line's first `max + 1` bytes go; the rest is skipped up to its break.
                    buf.advance(end);
                    self.next = 0;
                    self.discarding = true;
                    return Err(LineError::TooLong);
                }
                None => {
                    self.next = buf.len();
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<BytesMut>, LineError> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        self.next = 0;
        if buf.is_empty() || self.discarding {
            buf.clear();
            return Ok(None);
        }
        Ok(Some(buf.split_to(buf.len())))
    }
}

/// A JSON text on one line. Outside strings (which cannot hold a raw line break) a line break is
/// only whitespace, so it becomes a space: the message is the same, the framing stays whole.
pub fn one_line(text: String) -> String {
    if memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some() {
        text.replace(['\n', '\r'], " ")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `chunks` one after another (as reads would bring them), then the end of the
    /// stream; every line or error, in order.
    fn lines(max: usize, chunks: &[&[u8]]) -> Vec<Result<String, String>> {
        let mut codec = LineCodec::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let take = |result: Result<Option<BytesMut>, LineError>, out: &mut Vec<_>| match result {
            Ok(Some(line)) => {
                out.push(Ok(String::from_utf8_lossy(&line).into_owned()));
                true
            }
            Ok(None) => false,
            Err(error) => {
                out.push(Err(error.to_string()));
                true
            }
        };
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while take(codec.decode(&mut buf), &mut out) {}
        }
        while take(codec.decode_eof(&mut buf), &mut out) {}
        out
    }

    fn ok(items: &[&str]) -> Vec<Result<String, String>> {
        items.iter().map(|s| Ok(s.to_string())).collect()
    }

    #[test]
    fn lines_are_split_at_line_breaks_wherever_the_reads_cut_them() {
        let text = b"{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n";
        let want = ok(&["{\"a\":1}", "{\"b\":2}\r", "", "{\"c\":3}"]);
        // Every way of cutting the bytes into two reads, and one byte per read.
        for cut in 0..=text.len() {
            assert_eq!(
                lines(64, &[&text[..cut], &text[cut..]]),
                want,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(lines(64, &bytes), want);
    }

    #[test]
    fn a_last_line_without_a_break_is_a_line_at_the_end() {
        assert_eq!(
            lines(64, &[b"{\"a\":1}\n{\"b\""]),
            ok(&["{\"a\":1}", "{\"b\""])
        );
        assert_eq!(lines(64, &[b""]), ok(&[]));
        assert_eq!(lines(64, &[b"x\n"]), ok(&["x"]));
    }

    #[test]
    fn a_line_longer_than_the_limit_is_one_error_and_the_next_lines_still_come() {
        let too_long = Err("a line is longer than the limit".to_string());
        // Exactly the limit is fine; one more byte is not.
        assert_eq!(lines(4, &[b"abcd\nefg\n"]), ok(&["abcd", "efg"]));
        assert_eq!(
            lines(4, &[b"abcde\nfg\n"]),
            vec![too_long.clone(), Ok("fg".into())]
        );
        // The long line comes in many reads; its rest is skipped, whatever its length.
        assert_eq!(
            lines(4, &[b"ok\nabc", b"defgh", b"ijklmnop", b"qr\nst\n"]),
            vec![Ok("ok".into()), too_long.clone(), Ok("st".into())]
        );
        // A long last line with no break: the error, then nothing.
        assert_eq!(lines(4, &[b"abcdefgh"]), vec![too_long]);
    }

    /// The same lines and errors as tokio-util's delimiter codec (which this one replaces) on
    /// random streams of short lines, long lines and carriage returns, cut into random reads.
    #[test]
    fn it_reads_what_tokio_utils_delimiter_codec_reads() {
        use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError};
        let theirs = |max: usize, chunks: &[&[u8]]| {
            let mut codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), max);
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            let mut take = |r: Result<Option<bytes::Bytes>, AnyDelimiterCodecError>| match r {
                Ok(Some(line)) => {
                    out.push(Ok(String::from_utf8_lossy(&line).into_owned()));
                    true
                }
                Ok(None) => false,
                Err(_) => {
                    out.push(Err("a line is longer than the limit".to_string()));
                    true
                }
            };
            for chunk in chunks {
                buf.extend_from_slice(chunk);
                while take(codec.decode(&mut buf)) {}
            }
            while take(codec.decode_eof(&mut buf)) {}
            out
        };
        let mut rng = fastrand::Rng::with_seed(0x11AE5);
        for case in 0..2000 {
            let max = rng.usize(1..12);
            let text: Vec<u8> = (0..rng.usize(0..80))
                .map(|_| match rng.u8(0..10) {
                    0..=1 => b'\n',
                    2 => b'\r',
                    _ => b'a' + rng.u8(0..26),
                })
                .collect();
            let mut chunks = Vec::new();
            let mut rest = &text[..];
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(rng.usize(1..=rest.len()));
                chunks.push(chunk);
                rest = tail;
            }
            assert_eq!(
                lines(max, &chunks),
                theirs(max, &chunks),
                "case {case}: max {max}, {:?}",
                String::from_utf8_lossy(&text)
            );
        }
    }

    #[test]
    fn one_line_makes_line_breaks_spaces_and_leaves_other_text_alone() {
        assert_eq!(one_line("{\n \"a\": 1\r\n}".into()), "{  \"a\": 1  }");
        let same = "{\"a\":\"x\\ny\"}".to_string();
        assert_eq!(one_line(same.clone()), same);
    }
}
