//! Owns the text helpers every module shares to keep what it reports bounded: cutting a
//! string at a character boundary ([`truncate`]) and flattening it onto one line
//! ([`one_line`]). A leaf: it depends on nothing of panto's, so any module may use it.

/// `s` cut to at most `max` bytes, at a character boundary (never inside a UTF-8
/// sequence); `s` itself when it is short enough.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `text` on one line (line breaks as spaces), cut at a character boundary to at most
/// `max` bytes with "…" marking the cut.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.len() <= max {
        return flat;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !flat.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &flat[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_cuts_at_char_boundaries() {
        let s = "aé😀z";
        for max in 0..=s.len() + 1 {
            let t = truncate(s, max);
            assert!(t.len() <= max && s.starts_with(t), "{max}: {t:?}");
        }
        assert_eq!(truncate(s, 2), "a");
        assert_eq!(truncate(s, 7), "aé😀");
    }

    #[test]
    fn one_line_flattens_and_marks_the_cut() {
        assert_eq!(one_line("a\nb\r\nc", 100), "a b  c");
        let cut = one_line(&"é".repeat(100), 11);
        assert!(cut.len() <= 11 && cut.ends_with('…'), "{cut:?}");
        assert_eq!(cut, format!("{}…", "é".repeat(4)));
    }
}
