//! Owns the Server-Sent Events framing: an incremental, I/O-free parser that turns
//! bytes into SSE events following the WHATWG rules (html.spec.whatwg.org,
//! "event stream interpretation"). It knows nothing about JSON or providers.
//!
//! Written by hand for the cases where SSE parsers go wrong and that matter here: a BOM
//! split across two reads, a lone CR ending a line (also as the last byte of a read), a
//! CRLF split across reads, and a long line arriving in many small reads, which must
//! not be re-scanned from its start at every read (the tests below cover each, the
//! last one with a 4 MiB line fed 3 bytes at a time). Lines are split on bytes (CR
//! and LF never occur inside a multi-byte UTF-8 sequence), fields are decoded as UTF-8
//! with U+FFFD for invalid bytes.

use crate::error::{Error, Result};

/// Default cap on one event's size (data plus the line being read): 16 MiB.
pub const DEFAULT_MAX_EVENT_SIZE: usize = 16 * 1024 * 1024;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One dispatched event, borrowing the parser's buffers (valid during the callback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, or `"message"` when none was given.
    pub event: &'a str,
    /// The joined `data:` lines, without the final LF.
    pub data: &'a str,
    /// The last event ID in effect when this event was dispatched (`""` if none).
    pub id: &'a str,
}

/// Incremental SSE parser: call [`SseParser::feed`] with each chunk as it arrives.
#[derive(Debug)]
pub struct SseParser {
    max_event_size: usize,
    /// How many bytes of a leading BOM have matched so far; 3 once the start of the
    /// stream has been settled either way.
    bom_seen: u8,
    /// The previous chunk ended in CR: an LF starting the next chunk ends no new line.
    pending_cr: bool,
    line: Vec<u8>,
    data: Vec<u8>,
    event_type: Vec<u8>,
    id_buffer: Vec<u8>,
    last_id: String,
    retry_ms: Option<u64>,
    /// Scratch for events whose data is not valid UTF-8 (decoded lossily).
    lossy: String,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(DEFAULT_MAX_EVENT_SIZE)
    }
}

impl SseParser {
    /// A parser whose events may be at most `max_event_size` bytes (a larger one is a
    /// `protocol` error).
    pub fn new(max_event_size: usize) -> SseParser {
        SseParser {
            max_event_size,
            bom_seen: 0,
            pending_cr: false,
            line: Vec::new(),
            data: Vec::new(),
            event_type: Vec::new(),
            id_buffer: Vec::new(),
            last_id: String::new(),
            retry_ms: None,
            lossy: String::new(),
        }
    }

    /// The last `retry:` value the stream set, in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// True when bytes of an event that was never dispatched are buffered (an
    /// unterminated final event at end of stream, which the spec discards).
    pub fn has_pending(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty()
    }

    /// Feeds one chunk, calling `on_event` for every event it completes. Returns whether
    /// the chunk carried anything but comments and blank lines (keep-alive traffic does
    /// not count as progress for idle timeouts). Stops at the first error, either from
    /// `on_event` or a `protocol` error when one event outgrows the maximum size.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        mut on_event: impl FnMut(SseEvent<'_>) -> Result<()>,
    ) -> Result<bool> {
        let mut input = chunk;
        if self.bom_seen < 3 {
            while self.bom_seen < 3 {
                let Some((&b, rest)) = input.split_first() else {
                    return Ok(false);
                };
                if b == BOM[self.bom_seen as usize] {
                    self.bom_seen += 1;
                    input = rest;
                } else {
                    // Not a BOM after all: the bytes matched so far are line content.
                    self.line.extend_from_slice(&BOM[..self.bom_seen as usize]);
                    self.bom_seen = 3;
                }
            }
        }
        // An empty chunk must not settle a pending CR: the LF of a CRLF may still come in
        // the next non-empty chunk (found by the chunking property test).
        if self.pending_cr && !input.is_empty() {
            self.pending_cr = false;
            if input.first() == Some(&b'\n') {
                input = &input[1..];
            }
        }
        let mut progress = false;
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', input) {
            let segment = &input[..pos];
            progress |= self.is_content(segment);
            if self.line.is_empty() {
                self.process_line(segment, &mut on_event)?;
            } else {
                self.check_size(segment.len())?;
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(segment);
                let r = self.process_line(&line, &mut on_event);
                line.clear();
                self.line = line;
                r?;
            }
            let mut next = pos + 1;
            if input[pos] == b'\r' {
                match input.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            input = &input[next..];
        }
        if !input.is_empty() {
            progress |= self.is_content(input);
            self.check_size(input.len())?;
            self.line.extend_from_slice(input);
        }
        Ok(progress)
    }

    fn is_content(&self, segment: &[u8]) -> bool {
        let first = self.line.first().or(segment.first());
        !segment.is_empty() && first != Some(&b':')
    }

    fn check_size(&self, extra: usize) -> Result<()> {
        if self.line.len() + self.data.len() + extra > self.max_event_size {
            return Err(Error::protocol(format!(
                "an SSE event exceeds the maximum size of {} bytes",
                self.max_event_size
            )));
        }
        Ok(())
    }

    fn process_line(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(SseEvent<'_>) -> Result<()>,
    ) -> Result<()> {
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                self.check_size(value.len() + 1)?;
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            // An id containing NUL is ignored.
            b"id" if !value.contains(&0) => {
                self.id_buffer.clear();
                self.id_buffer.extend_from_slice(value);
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only, so parsing can fail only on overflow: saturate.
                self.retry_ms = Some(
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(u64::MAX),
                );
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseEvent<'_>) -> Result<()>) -> Result<()> {
        if self.last_id.as_bytes() != self.id_buffer.as_slice() {
            self.last_id = String::from_utf8_lossy(&self.id_buffer).into_owned();
        }
        if self.data.is_empty() {
            self.event_type.clear();
            return Ok(());
        }
        self.data.pop(); // the LF appended after the last data line
        let event_owned;
        let event = match std::str::from_utf8(&self.event_type) {
            Ok("") => "message",
            Ok(s) => s,
            Err(_) => {
                event_owned = String::from_utf8_lossy(&self.event_type).into_owned();
                &event_owned
            }
        };
        let data = match std::str::from_utf8(&self.data) {
            Ok(s) => s,
            Err(_) => {
                self.lossy = String::from_utf8_lossy(&self.data).into_owned();
                &self.lossy
            }
        };
        let r = on_event(SseEvent {
            event,
            data,
            id: &self.last_id,
        });
        self.data.clear();
        self.event_type.clear();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<(String, String, String)> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |e| {
                out.push((e.event.to_string(), e.data.to_string(), e.id.to_string()));
                Ok(())
            })
            .unwrap();
        }
        out
    }

    fn datas(input: &[u8]) -> Vec<String> {
        parse_chunks(&[input]).into_iter().map(|e| e.1).collect()
    }

    #[test]
    fn wpt_vectors() {
        let table: Vec<(&[u8], Vec<&str>)> = vec![
            // format-bom: only the first BOM is stripped; a second one makes an unknown field.
            (b"\xEF\xBB\xBFdata:1\n\n\xEF\xBB\xBFdata:2\n\ndata:3\n\n", vec!["1", "3"]),
            (b"\xEF\xBB\xBF\xEF\xBB\xBFdata:1\n\ndata:2\n\ndata:3\n\n", vec!["2", "3"]),
            (
                b"data:1\r:\0\n:\r\ndata:2\n:xxxx\rdata:3\n:data:fail\r:yyy\ndata:4\n\n",
                vec!["1\n2\n3\n4"],
            ),
            (b"data:test1\n\nid:test\ndata:test2", vec!["test1"]),
            (b"data:\n\ndata\ndata\n\ndata:test\n\n", vec!["", "\n", "test"]),
            (
                b"data:\0\ndata:  2\rData:1\ndata\0:2\ndata:1\r\0data:4\nda-ta:3\rdata_5\ndata:3\rdata:\r\n data:32\ndata:4\n\n",
                vec!["\0\n 2\n1\n3\n\n4"],
            ),
            (
                b"data:test\n data\ndata\nfoobar:xxx\njustsometext\n:comment\ndata:test\n\n",
                vec!["test\n\ntest"],
            ),
            (b"data:\ttest\rdata: \ndata:test\n\n", vec!["\ttest\n\ntest"]),
            (b"data:test\r\ndata\ndata:test\r\n\r", vec!["test\n\ntest"]),
            (b"data:\0\n\n", vec!["\0"]),
            (b": keep-alive\n\n: OPENROUTER PROCESSING\n\ndata: x\n\n", vec!["x"]),
            (b"event: only\nid: 3\n\n", vec![]),
        ];
        for (input, want) in table {
            assert_eq!(
                datas(input),
                want,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn event_and_id_fields() {
        let evs = parse_chunks(&[b"event: ping\nid: 7\ndata: a\n\nevent:\ndata: b\n\nid\ndata: c\n\nid: x\0y\ndata: d\n\n"]);
        assert_eq!(
            evs,
            vec![
                ("ping".into(), "a".into(), "7".into()),
                ("message".into(), "b".into(), "7".into()),
                ("message".into(), "c".into(), "".into()),
                ("message".into(), "d".into(), "".into()),
            ]
        );
    }

    #[test]
    fn retry_field_digits_only() {
        let mut p = SseParser::default();
        p.feed(
            b"retry: 02000\n\nretry: +500\nretry: 1000x\nretry\n\n",
            |_| Ok(()),
        )
        .unwrap();
        assert_eq!(p.retry_ms(), Some(2000));
    }

    #[test]
    fn splits_across_chunks() {
        // CRLF split, BOM split, CR at the end of a chunk followed by a non-LF byte.
        let a = parse_chunks(&[
            b"\xEF",
            b"\xBB",
            b"\xBFdata: 1\r",
            b"\n\r",
            b"\ndata: 2\r",
            b"\r",
        ]);
        assert_eq!(
            a.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(),
            vec!["1", "2"]
        );
        // A partial BOM is data: EF BB then 'x' makes the line "\u{FFFD}…" an unknown field.
        let b = parse_chunks(&[b"\xEF\xBB", b"data: 1\n\ndata: 2\n\n"]);
        assert_eq!(
            b.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(),
            vec!["2"]
        );
        // Multi-byte UTF-8 split across chunks.
        let c = parse_chunks(&[b"data: \xC2", b"\xB0C\n\n"]);
        assert_eq!(c[0].1, "°C");
    }

    #[test]
    fn invalid_utf8_becomes_replacement() {
        assert_eq!(datas(b"data: a\xFFb\n\n"), vec!["a\u{FFFD}b"]);
    }

    #[test]
    fn oversized_event_is_a_protocol_error() {
        let mut p = SseParser::new(64);
        let big = vec![b'x'; 100];
        let mut input = b"data: ".to_vec();
        input.extend_from_slice(&big);
        let err = p.feed(&input, |_| Ok(())).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Protocol);
        // Many data lines, each small, also count.
        let mut p = SseParser::new(64);
        let err = (0..20)
            .try_for_each(|_| p.feed(b"data: 0123456789\n", |_| Ok(())).map(|_| ()))
            .unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Protocol);
    }

    #[test]
    fn progress_ignores_comments() {
        let mut p = SseParser::default();
        assert!(!p.feed(b": keep-alive\n\n", |_| Ok(())).unwrap());
        assert!(!p.feed(b":", |_| Ok(())).unwrap());
        assert!(!p.feed(b" still a comment\n", |_| Ok(())).unwrap());
        assert!(p.feed(b"da", |_| Ok(())).unwrap());
    }

    #[test]
    fn huge_line_in_tiny_chunks_is_linear() {
        // 4 MiB in 3-byte chunks: quadratic re-scanning would take minutes; this bounds
        // the work by counting, not by timing.
        let mut p = SseParser::default();
        let mut line = b"data: ".to_vec();
        line.extend(std::iter::repeat_n(b'a', 4 << 20));
        line.extend_from_slice(b"\n\n");
        let mut n = 0;
        for c in line.chunks(3) {
            p.feed(c, |e| {
                n = e.data.len();
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(n, 4 << 20);
    }
}
