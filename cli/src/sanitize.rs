//! Owns making untrusted text safe for a terminal. Model text, reasoning, tool names and
//! arguments chosen by the server, tool output and server error messages are all written
//! to the user's terminal in human mode; raw, an escape sequence in them could rewrite
//! the screen, set the window title, write the clipboard (OSC 52) or hide what a tool
//! call really does.
//!
//! What comes out:
//! - `\n` and `\t` pass through; `\r\n` becomes `\n`.
//! - Escape sequences (ESC or C1 introduced: CSI, OSC, DCS, SOS, PM, APC, and the short
//!   two- and three-character escapes) are removed whole, parameters and payload
//!   included. A string sequence (OSC, DCS, …) ends at BEL, ST, CAN, SUB, a newline or
//!   after [`MAX_STRING_CHARS`]; whatever follows is printed as plain text, which is safe
//!   because its introducer never reached the terminal.
//! - Every other control character (C0, a lone `\r`, DEL, C1) is shown as a visible
//!   symbol: the Unicode control picture for C0 and DEL (`␀`, `␇`, `␍`, `␡`), `�` for C1.
//!
//! [`Sanitizer`] keeps its state between calls, so a sequence split across two stream
//! fragments is still recognized and removed.

/// Longest string sequence (OSC, DCS, …) swallowed before giving up on finding its end.
const MAX_STRING_CHARS: usize = 4096;
/// Longest CSI sequence swallowed (real ones are a few characters).
const MAX_CSI_CHARS: usize = 256;

const ESC: char = '\x1b';

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Escape,
    /// After ESC and intermediate bytes (`ESC ( B`).
    EscapeIntermediate,
    /// Inside a control sequence (`ESC [` or C1 CSI), counting its characters.
    Csi(usize),
    /// Inside a control string (OSC, DCS, SOS, PM, APC), counting its characters.
    Str(usize),
    /// ESC seen inside a control string: `\` ends it (ST), anything else starts anew.
    StrEscape,
}

/// A streaming filter; one per stream of fragments that belong together.
#[derive(Debug)]
pub struct Sanitizer {
    state: State,
    /// A `\r` whose fate depends on the next character (`\r\n` is a plain newline).
    pending_cr: bool,
}

impl Default for Sanitizer {
    fn default() -> Self {
        Sanitizer::new()
    }
}

impl Sanitizer {
    pub fn new() -> Sanitizer {
        Sanitizer {
            state: State::Ground,
            pending_cr: false,
        }
    }

    /// Filters the next fragment into `out`.
    pub fn push(&mut self, text: &str, out: &mut String) {
        for c in text.chars() {
            self.char(c, out);
        }
    }

    /// The stream of fragments ended: emits what was held back and forgets any
    /// unfinished sequence, so the next stream starts clean.
    pub fn finish(&mut self, out: &mut String) {
        if std::mem::take(&mut self.pending_cr) {
            out.push(control_picture('\r'));
        }
        self.state = State::Ground;
    }

    fn char(&mut self, c: char, out: &mut String) {
        if std::mem::take(&mut self.pending_cr) && c != '\n' {
            out.push(control_picture('\r'));
        }
        match self.state {
            State::Ground => self.ground(c, out),
            State::Escape => match c {
                '[' => self.state = State::Csi(0),
                ']' | 'P' | 'X' | '^' | '_' => self.state = State::Str(0),
                ' '..='/' => self.state = State::EscapeIntermediate,
                '0'..='~' => self.state = State::Ground,
                ESC => {}
                _ => self.abort(c, out),
            },
            State::EscapeIntermediate => match c {
                ' '..='/' => {}
                '0'..='~' => self.state = State::Ground,
                _ => self.abort(c, out),
            },
            State::Csi(n) => match c {
                // Parameter and intermediate bytes.
                ' '..='?' if n < MAX_CSI_CHARS => self.state = State::Csi(n + 1),
                // The final byte.
                '@'..='~' => self.state = State::Ground,
                _ => self.abort(c, out),
            },
            State::Str(n) => match c {
                '\x07' | '\u{9c}' | '\x18' | '\x1a' => self.state = State::Ground,
                ESC => self.state = State::StrEscape,
                '\n' => self.abort(c, out),
                _ if n >= MAX_STRING_CHARS => self.abort(c, out),
                _ => self.state = State::Str(n + 1),
            },
            State::StrEscape => match c {
                '\\' => self.state = State::Ground,
                // The ESC began a new sequence.
                _ => {
                    self.state = State::Escape;
                    self.char(c, out);
                }
            },
        }
    }

    /// Ends the current sequence without its final character and treats `c` as text.
    fn abort(&mut self, c: char, out: &mut String) {
        self.state = State::Ground;
        self.ground(c, out);
    }

    fn ground(&mut self, c: char, out: &mut String) {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => self.pending_cr = true,
            ESC => self.state = State::Escape,
            '\u{9b}' => self.state = State::Csi(0),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => self.state = State::Str(0),
            c if c.is_control() => out.push(control_picture(c)),
            c => out.push(c),
        }
    }
}

/// A visible stand-in for a control character.
fn control_picture(c: char) -> char {
    match u32::from(c) {
        // U+2400 SYMBOL FOR NULL … U+241F SYMBOL FOR UNIT SEPARATOR.
        n @ 0..=0x1f => char::from_u32(0x2400 + n).unwrap_or('\u{fffd}'),
        0x7f => '\u{2421}',
        _ => '\u{fffd}',
    }
}

/// `text` made safe as a whole (a name, one line of output, a message).
pub fn clean(text: &str) -> String {
    let mut sanitizer = Sanitizer::new();
    let mut out = String::with_capacity(text.len());
    sanitizer.push(text, &mut out);
    sanitizer.finish(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(fragments: &[&str]) -> String {
        let mut s = Sanitizer::new();
        let mut out = String::new();
        for f in fragments {
            s.push(f, &mut out);
        }
        s.finish(&mut out);
        out
    }

    /// Nothing a terminal would act on is left: no C0 but `\n`/`\t`, no DEL, no C1.
    fn assert_inert(text: &str) {
        for c in text.chars() {
            assert!(
                !c.is_control() || c == '\n' || c == '\t',
                "control {c:?} left in {text:?}"
            );
        }
    }

    #[test]
    fn plain_text_newlines_and_tabs_pass_through() {
        assert_eq!(clean("héllo\n\tworld ✓"), "héllo\n\tworld ✓");
        assert_eq!(clean("a\r\nb"), "a\nb");
    }

    #[test]
    fn escape_sequences_are_removed_whole() {
        assert_eq!(clean("a\x1b[2J\x1b[1;31mred\x1b[0m b"), "ared b");
        // OSC 52 (clipboard) and OSC 0 (title), ended by BEL or ST.
        assert_eq!(clean("x\x1b]52;c;ZXZpbA==\x07y"), "xy");
        assert_eq!(clean("x\x1b]0;pwned\x1b\\y"), "xy");
        // DCS, two- and three-character escapes (RIS resets the terminal).
        assert_eq!(clean("a\x1bPq#0;1\x1b\\b\x1bcc\x1b(Bd"), "abcd");
        // C1 introducers.
        assert_eq!(clean("a\u{9b}31mb\u{9d}0;t\u{9c}c"), "abc");
    }

    #[test]
    fn other_controls_are_shown_visibly() {
        assert_eq!(clean("a\0b\x07c\x7fd\re"), "a␀b␇c␡d␍e");
        assert_eq!(clean("a\u{85}b"), "a\u{fffd}b");
        assert_eq!(clean("end\r"), "end␍");
    }

    #[test]
    fn sequences_split_across_fragments_are_still_removed() {
        assert_eq!(stream(&["a\x1b", "]52;c;ZXZp", "bA==\x07b"]), "ab");
        assert_eq!(stream(&["a\x1b[", "2", "J", "b"]), "ab");
        assert_eq!(stream(&["a\x1b]0;t\x1b", "\\b"]), "ab");
        assert_eq!(stream(&["line\r", "\nnext"]), "line\nnext");
        assert_eq!(stream(&["a\r", "b"]), "a␍b");
    }

    #[test]
    fn an_unterminated_string_does_not_swallow_the_rest() {
        // A newline ends it; the text after shows (its introducer never got through).
        assert_eq!(clean("a\x1b]0;title\nvisible"), "a\nvisible");
        let long = format!("a\x1b]{}", "x".repeat(MAX_STRING_CHARS + 10));
        let out = clean(&long);
        assert!(out.starts_with('a') && out.ends_with("xxxxxxxxxx"), "{out}");
        assert_inert(&out);
    }

    #[test]
    fn a_broken_sequence_leaves_no_control_behind() {
        for text in [
            "\x1b",
            "\x1b\x1b[31m",
            "\x1b[31\x1b]0;x\x07",
            "\x1b[\x00m",
            "\x1b(\x07",
            "\x1b]\x1b[2J",
            "\u{9b}\u{9b}1",
        ] {
            assert_inert(&clean(text));
        }
    }

    #[test]
    fn every_control_character_is_neutralised() {
        let all: String = (0u32..0x100).filter_map(char::from_u32).collect();
        let out = clean(&all);
        assert_inert(&out);
        // Printable ASCII survives unless it was swallowed as part of a sequence.
        assert!(out.contains('\n') && out.contains('\t'));
    }
}
