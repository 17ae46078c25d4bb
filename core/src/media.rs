//! Owns the attachments of a turn: images and documents ([`Media`]), where their bytes
//! or URL come from, the media types panto accepts and how it tells them from the bytes
//! when none is given, and the [`Input`] of a turn — its text and attachments, in order.
//!
//! An attachment is a content block of the conversation (`Block::Image`,
//! `Block::Document`); how each provider writes it on the wire is `provider`'s business.
//! Its canonical JSON (saved history, events) is
//! `{"type":"image"|"document","media_type":…,"data":"<base64>","name"?}` for bytes and
//! `{"type":"image"|"document","url":…,"media_type"?,"name"?}` for a URL.

use std::path::Path;

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::message::Block;

/// The image media types every provider panto speaks accepts.
pub const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];
/// The document media types: PDF.
pub const DOCUMENT_TYPES: &[&str] = &["application/pdf"];

/// Where an attachment's content is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaSource {
    /// The provider fetches it (an `https:` URL; OpenAI also takes a `data:` URL).
    Url(String),
    /// The bytes themselves, sent base64-encoded.
    Bytes {
        /// The content's media type (`image/png`, `application/pdf`, …).
        media_type: String,
        /// The content.
        data: Bytes,
    },
}

/// An image or a document: its content and, where known, its file name (OpenAI needs
/// one for a PDF; the transcript shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MediaJson", into = "MediaJson")]
pub struct Media {
    /// Where the content is.
    pub source: MediaSource,
    /// Its file name, where known.
    pub name: Option<String>,
    /// For a URL: the media type, when the caller gave one (never guessed).
    pub url_media_type: Option<String>,
}

/// The serde form of [`Media`] (without the block's `type`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MediaJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl From<Media> for MediaJson {
    fn from(m: Media) -> MediaJson {
        match m.source {
            MediaSource::Url(url) => MediaJson {
                media_type: m.url_media_type,
                data: None,
                url: Some(url),
                name: m.name,
            },
            MediaSource::Bytes { media_type, data } => MediaJson {
                media_type: Some(media_type),
                data: Some(base64::engine::general_purpose::STANDARD.encode(&data)),
                url: None,
                name: m.name,
            },
        }
    }
}

impl TryFrom<MediaJson> for Media {
    type Error = String;
    fn try_from(j: MediaJson) -> std::result::Result<Media, String> {
        match (j.data, j.url) {
            (Some(data), None) => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(data.as_bytes())
                    .map_err(|e| format!("\"data\" is not base64 ({e})"))?;
                let media_type = match j.media_type {
                    Some(t) => t,
                    None => sniff(&data)
                        .ok_or("\"media_type\" is missing and the bytes are not a known type")?
                        .to_owned(),
                };
                Ok(Media {
                    source: MediaSource::Bytes {
                        media_type,
                        data: Bytes::from(data),
                    },
                    name: j.name,
                    url_media_type: None,
                })
            }
            (None, Some(url)) => Ok(Media {
                source: MediaSource::Url(url),
                name: j.name,
                url_media_type: j.media_type,
            }),
            _ => Err("an attachment has exactly one of \"data\" (base64) and \"url\"".into()),
        }
    }
}

impl Media {
    /// An attachment the provider fetches from `url`.
    pub fn url(url: impl Into<String>) -> Media {
        Media {
            source: MediaSource::Url(url.into()),
            name: None,
            url_media_type: None,
        }
    }

    /// An attachment of `data`. Its type is sniffed from the bytes ([`sniff`]) whether
    /// or not one is given: a given type that the bytes contradict (PDF bytes given as
    /// `image/png`) is a `config` error naming both, and bytes of no known type without
    /// a given type are one too. Bytes of no known type keep the type given (the
    /// provider judges them).
    pub fn bytes(data: impl Into<Bytes>, media_type: Option<&str>) -> Result<Media> {
        let data = data.into();
        let media_type = match media_type {
            Some(t) => checked_type(t, &data)?,
            None => sniff(&data)
                .ok_or_else(|| {
                    Error::config(format!(
                        "attachment: cannot tell the type of {} bytes (known: PNG, JPEG, GIF, \
                         WebP, PDF); give the media type",
                        data.len()
                    ))
                })?
                .to_owned(),
        };
        Ok(Media {
            source: MediaSource::Bytes { media_type, data },
            name: None,
            url_media_type: None,
        })
    }

    /// Reads a file: its type is sniffed from its bytes, its name kept. An unreadable
    /// file, one that is not a regular file (a FIFO, a device, a directory), one larger
    /// than the default `max_message_bytes` or one of no known type is a `config` error
    /// naming the path ([`read_file`]). [`Media::from_path_limited`] takes the limit.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Media> {
        Media::from_path_limited(path, crate::config::DEFAULT_MAX_MESSAGE_BYTES)
    }

    /// [`Media::from_path`] reading at most `max_bytes` (an agent's
    /// `max_message_bytes`): a longer file is refused after reading `max_bytes + 1`
    /// bytes, whatever its metadata says.
    pub fn from_path_limited(path: impl AsRef<Path>, max_bytes: usize) -> Result<Media> {
        let path = path.as_ref();
        let data = read_file(path, max_bytes, "attachment", "max_message_bytes")?;
        let media_type = sniff(&data).ok_or_else(|| {
            Error::config(format!(
                "attachment {}: not a PNG, JPEG, GIF, WebP or PDF file",
                path.display()
            ))
        })?;
        Ok(Media {
            source: MediaSource::Bytes {
                media_type: media_type.to_owned(),
                data: Bytes::from(data),
            },
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()),
            url_media_type: None,
        })
    }

    /// Sets the file name.
    pub fn with_name(mut self, name: impl Into<String>) -> Media {
        self.name = Some(name.into());
        self
    }

    /// The media type: of the bytes, or the one given with a URL.
    pub fn media_type(&self) -> Option<&str> {
        match &self.source {
            MediaSource::Bytes { media_type, .. } => Some(media_type),
            MediaSource::Url(_) => self.url_media_type.as_deref(),
        }
    }

    /// How many bytes it holds (for a URL: the URL's length).
    pub fn size(&self) -> usize {
        match &self.source {
            MediaSource::Bytes { data, .. } => data.len(),
            MediaSource::Url(url) => url.len(),
        }
    }

    /// The bytes base64-encoded, or `None` for a URL.
    pub fn base64(&self) -> Option<String> {
        match &self.source {
            MediaSource::Bytes { data, .. } => {
                Some(base64::engine::general_purpose::STANDARD.encode(data))
            }
            MediaSource::Url(_) => None,
        }
    }

    /// A `data:` URL of the bytes, or the URL itself.
    pub fn data_url(&self) -> String {
        match &self.source {
            MediaSource::Bytes { media_type, .. } => format!(
                "data:{media_type};base64,{}",
                self.base64().unwrap_or_default()
            ),
            MediaSource::Url(url) => url.clone(),
        }
    }

    /// One line about it, never its content: `image/png, 1234 bytes` or the URL.
    pub fn describe(&self) -> String {
        let name = self
            .name
            .as_deref()
            .map(|n| format!("{n}, "))
            .unwrap_or_default();
        match &self.source {
            MediaSource::Bytes { media_type, data } => {
                format!("{name}{media_type}, {} bytes", data.len())
            }
            MediaSource::Url(url) => format!("{name}{url}"),
        }
    }
}

/// The type given for `data`, lower-cased, unless the bytes say otherwise: a `config`
/// error naming both types when [`sniff`] knows the bytes as another type. A given type
/// decides nothing the bytes can tell — an image declared as PNG is sent as what it is,
/// and a PDF declared as an image is refused, never sent as one. `image/jpg`, a common
/// misspelling, is taken as `image/jpeg`.
pub fn checked_type(declared: &str, data: &[u8]) -> Result<String> {
    let declared = declared.trim().to_ascii_lowercase();
    let Some(actual) = sniff(data) else {
        return Ok(declared);
    };
    if declared == actual || (declared == "image/jpg" && actual == "image/jpeg") {
        return Ok(actual.to_owned());
    }
    Err(Error::config(format!(
        "attachment: given as {declared:?}, but the bytes are {actual:?}; give the type the \
         bytes have, or none (it is sniffed)"
    )))
}

/// Reads the regular file at `path`, at most `limit` bytes: what a caller names by path
/// (an attachment, a CLI's `--schema`) is never read whole before its size is known.
/// The file is opened without blocking (a FIFO with no writer would block an ordinary
/// open forever) and refused unless it is a regular file (a FIFO, a device such as
/// `/dev/zero`, a directory, a socket); then at most `limit + 1` bytes are read, so the
/// limit holds whatever the metadata says (a device reports size 0, a sparse file its
/// apparent size, a growing file less than it holds). Every failure is a `config` error
/// starting with `what` and the path; a file past the limit names `limit_name`.
pub fn read_file(path: &Path, limit: usize, what: &str, limit_name: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let shown = path.display();
    let fail = |why: String| Error::config(format!("{what} {shown}: {why}"));
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    #[cfg(not(unix))]
    {
        // Without a non-blocking open, the path's own type is checked before opening.
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if !meta.is_file() {
            return Err(fail(not_regular(&meta.file_type())));
        }
    }
    let file = options.open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail(not_regular(&meta.file_type())));
    }
    let cap = usize::try_from(meta.len()).unwrap_or(usize::MAX).min(limit);
    let mut data = Vec::with_capacity(cap.saturating_add(1));
    let cut = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    file.take(cut)
        .read_to_end(&mut data)
        .map_err(|e| fail(e.to_string()))?;
    if data.len() > limit {
        return Err(fail(format!("more than {limit_name} ({limit})")));
    }
    Ok(data)
}

/// What a file that is not a regular file is, for [`read_file`]'s error.
fn not_regular(ty: &std::fs::FileType) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let what = if ty.is_fifo() {
            "a FIFO"
        } else if ty.is_char_device() {
            "a character device"
        } else if ty.is_block_device() {
            "a block device"
        } else if ty.is_socket() {
            "a socket"
        } else if ty.is_dir() {
            "a directory"
        } else {
            "not a file"
        };
        format!("not a regular file ({what})")
    }
    #[cfg(not(unix))]
    {
        let what = if ty.is_dir() {
            "a directory"
        } else {
            "not a file"
        };
        format!("not a regular file ({what})")
    }
}

/// The media type of `data` from its first bytes: PNG, JPEG, GIF, WebP or PDF; `None`
/// for anything else.
pub fn sniff(data: &[u8]) -> Option<&'static str> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if data.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Some("image/webp")
    } else if data.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

/// The input of a turn: text and attachments, in the order the model reads them. A
/// plain string converts into one text part.
///
/// ```
/// use panto::{Input, Media};
/// let png = b"\x89PNG\r\n\x1a\n....".to_vec();
/// let input = Input::new()
///     .text("What is in this picture?")
///     .image(Media::bytes(png, None)?)
///     .image(Media::url("https://example.com/cat.jpg"));
/// assert_eq!(input.parts().len(), 3);
/// # Ok::<(), panto::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Input {
    parts: Vec<Block>,
}

impl Input {
    /// An empty input (add parts with the builder methods).
    pub fn new() -> Input {
        Input::default()
    }

    /// Adds a text part.
    pub fn text(mut self, text: impl Into<String>) -> Input {
        self.parts.push(Block::Text { text: text.into() });
        self
    }

    /// Adds an image.
    pub fn image(mut self, media: Media) -> Input {
        self.parts.push(Block::Image(media));
        self
    }

    /// Adds a document (PDF).
    pub fn document(mut self, media: Media) -> Input {
        self.parts.push(Block::Document(media));
        self
    }

    /// Adds the file at `path` as an image or a document, by its sniffed type.
    pub fn file(self, path: impl AsRef<Path>) -> Result<Input> {
        let media = Media::from_path(path)?;
        Ok(if media.media_type() == Some("application/pdf") {
            self.document(media)
        } else {
            self.image(media)
        })
    }

    /// The parts, in order: `Block::Text`, `Block::Image` and `Block::Document`.
    pub fn parts(&self) -> &[Block] {
        &self.parts
    }

    /// An input from parts; [`Input::check`] refuses blocks other than text, image
    /// and document.
    pub fn from_parts(parts: Vec<Block>) -> Input {
        Input { parts }
    }

    /// The parts, in order.
    pub fn into_parts(self) -> Vec<Block> {
        self.parts
    }

    /// True when the input holds an attachment.
    pub fn has_attachments(&self) -> bool {
        self.parts
            .iter()
            .any(|b| matches!(b, Block::Image(_) | Block::Document(_)))
    }

    /// The bytes of its text parts.
    pub fn text_len(&self) -> usize {
        self.parts
            .iter()
            .map(|b| match b {
                Block::Text { text } => text.len(),
                _ => 0,
            })
            .sum()
    }

    /// Parses the JSON input form the C ABI, the CLI and the bindings share: a string
    /// (one text part), or an array of parts, each a string (text) or an object:
    /// `{"type":"text","text"}`, or `{"type":"image"|"document"}` with one of
    /// `"url"`, `"data"` (base64) or `"path"` (a file to read), and optional
    /// `"media_type"` (sniffed from the bytes when absent) and `"name"`. A bad part is a
    /// `config` error naming its place (`input[1]`).
    pub fn from_json(json: &str) -> Result<Input> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("input: not valid JSON: {e}")))?;
        Input::from_value(&v)
    }

    /// [`Input::from_json`] for a parsed value.
    pub fn from_value(v: &Value) -> Result<Input> {
        Input::from_value_limited(v, crate::config::DEFAULT_MAX_MESSAGE_BYTES)
    }

    /// [`Input::from_value`] reading each `"path"` part with
    /// [`Media::from_path_limited`]`(path, max_file_bytes)` (an agent's
    /// `max_message_bytes`).
    pub fn from_value_limited(v: &Value, max_file_bytes: usize) -> Result<Input> {
        let items = match v {
            Value::String(s) => return Ok(Input::from(s.as_str())),
            Value::Array(items) => items,
            _ => {
                return Err(Error::config(
                    "input: must be a string or an array of parts",
                ))
            }
        };
        let mut input = Input::new();
        for (i, item) in items.iter().enumerate() {
            input.parts.push(part_from_value(item, i, max_file_bytes)?);
        }
        Ok(input)
    }

    /// Checks the parts before anything is sent: only text, images and documents; an
    /// image of PNG, JPEG, GIF or WebP, a PDF document; no attachment larger than
    /// `max_part_bytes`. A failure is a `config` error naming the part.
    pub fn check(&self, max_part_bytes: usize) -> Result<()> {
        for (i, b) in self.parts.iter().enumerate() {
            let (kind, media, allowed) = match b {
                Block::Text { .. } => continue,
                Block::Image(m) => ("image", m, IMAGE_TYPES),
                Block::Document(m) => ("document", m, DOCUMENT_TYPES),
                _ => {
                    return Err(Error::config(format!(
                        "input[{i}]: an input holds text, images and documents only"
                    )))
                }
            };
            if media.size() > max_part_bytes {
                return Err(Error::config(format!(
                    "input[{i}]: the {kind} is {} bytes, more than max_message_bytes \
                     ({max_part_bytes})",
                    media.size()
                )));
            }
            if let Some(t) = media.media_type() {
                if !allowed.contains(&t) {
                    return Err(Error::config(format!(
                        "input[{i}]: {kind} of type {t:?}: not accepted (allowed: {})",
                        allowed.join(", ")
                    )));
                }
            }
            if let MediaSource::Url(url) = &media.source {
                if url.is_empty() {
                    return Err(Error::config(format!(
                        "input[{i}]: the {kind}'s URL is empty"
                    )));
                }
            }
        }
        Ok(())
    }
}

fn part_from_value(item: &Value, i: usize, max_file_bytes: usize) -> Result<Block> {
    let at = |why: String| Error::config(format!("input[{i}]: {why}"));
    let obj = match item {
        Value::String(s) => return Ok(Block::text(s.clone())),
        Value::Object(obj) => obj,
        _ => return Err(at("a part is a string or an object".into())),
    };
    let string = |key: &str| -> Result<Option<&str>> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(at(format!("\"{key}\" must be a string"))),
        }
    };
    let ty = string("type")?.ok_or_else(|| at("\"type\" is missing".into()))?;
    let known: &[&str] = match ty {
        "text" => &["type", "text"],
        "image" | "document" => &["type", "url", "data", "path", "media_type", "name"],
        other => {
            return Err(at(format!(
                "type {other:?}: the part types are text, image and document"
            )))
        }
    };
    if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(at(format!(
            "unknown key {k:?} (known: {})",
            known.join(", ")
        )));
    }
    if ty == "text" {
        let text = string("text")?.ok_or_else(|| at("\"text\" is missing".into()))?;
        return Ok(Block::text(text));
    }
    let media_type = string("media_type")?;
    let mut media = match (string("url")?, string("data")?, string("path")?) {
        (Some(url), None, None) => {
            let mut m = Media::url(url);
            m.url_media_type = media_type.map(str::to_owned);
            m
        }
        (None, Some(data), None) => {
            let data = base64::engine::general_purpose::STANDARD
                .decode(data.as_bytes())
                .map_err(|e| at(format!("\"data\" is not base64 ({e})")))?;
            Media::bytes(data, media_type).map_err(|e| at(e.message))?
        }
        (None, None, Some(path)) => {
            let mut m = Media::from_path_limited(path, max_file_bytes)?;
            if let (Some(t), MediaSource::Bytes { media_type, data }) = (media_type, &mut m.source)
            {
                *media_type = checked_type(t, data).map_err(|e| at(e.message))?;
            }
            m
        }
        _ => {
            return Err(at(
                "an image or document has exactly one of \"url\", \"data\" and \"path\"".into(),
            ))
        }
    };
    if let Some(name) = string("name")? {
        media.name = Some(name.to_owned());
    }
    Ok(if ty == "image" {
        Block::Image(media)
    } else {
        Block::Document(media)
    })
}

impl From<&str> for Input {
    fn from(text: &str) -> Input {
        Input::new().text(text)
    }
}

impl From<String> for Input {
    fn from(text: String) -> Input {
        Input::new().text(text)
    }
}

impl From<&String> for Input {
    fn from(text: &String) -> Input {
        Input::new().text(text.as_str())
    }
}

impl From<&Input> for Input {
    fn from(input: &Input) -> Input {
        input.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_the_known_types() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(sniff(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a.."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"%PDF-1.7"), Some("application/pdf"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(sniff(b""), None);
        assert!(Media::bytes(b"hello".to_vec(), None).is_err());
    }

    #[test]
    fn canonical_json_round_trips_bytes_exactly() {
        let data: Vec<u8> = (0..=255u8).chain(*b"\x89PNG").collect();
        let block = Block::Image(Media::bytes(data.clone(), Some("image/png")).unwrap());
        let json = serde_json::to_string(&block).unwrap();
        assert!(json.starts_with(r#"{"type":"image","media_type":"image/png","data":""#));
        let back: Block = serde_json::from_str(&json).unwrap();
        assert_eq!(back, block);
        let Block::Image(Media {
            source: MediaSource::Bytes { data: got, .. },
            ..
        }) = back
        else {
            panic!("not an image of bytes")
        };
        assert_eq!(&got[..], &data[..]);
        let url: Block =
            serde_json::from_str(r#"{"type":"document","url":"https://x/a.pdf"}"#).unwrap();
        assert_eq!(url, Block::Document(Media::url("https://x/a.pdf")));
        assert!(serde_json::from_str::<Block>(r#"{"type":"image"}"#).is_err());
        assert!(
            serde_json::from_str::<Block>(r#"{"type":"image","url":"u","data":"AA=="}"#).is_err()
        );
    }

    #[test]
    fn the_json_input_form() {
        let input = Input::from_json(
            r#"["look", {"type":"image","url":"https://x/c.png"},
                {"type":"document","data":"JVBERi0xLjQ=","name":"r.pdf"}]"#,
        )
        .unwrap();
        assert_eq!(input.parts().len(), 3);
        let Block::Document(doc) = &input.parts()[2] else {
            panic!()
        };
        assert_eq!(doc.media_type(), Some("application/pdf"));
        assert_eq!(doc.name.as_deref(), Some("r.pdf"));
        assert_eq!(Input::from_json(r#""hi""#).unwrap(), Input::from("hi"));
        let err =
            Input::from_json(r#"["a", {"type":"image","path":"/no/such/cat.png"}]"#).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Config);
        assert!(err.message.contains("/no/such/cat.png"), "{}", err.message);
        let err = Input::from_json(r#"[{"type":"image","data":"aGVsbG8="}]"#).unwrap_err();
        assert!(
            err.message.starts_with("input[0]: attachment: cannot tell"),
            "{}",
            err.message
        );
        let err = Input::from_json(r#"[{"type":"image","uri":"x"}]"#).unwrap_err();
        assert!(
            err.message.contains("unknown key \"uri\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn check_refuses_big_parts_and_wrong_types() {
        let big = Input::new().text("x").image(
            Media::bytes(
                [b"\x89PNG\r\n\x1a\n".as_slice(), &[0u8; 2000]].concat(),
                None,
            )
            .unwrap(),
        );
        assert!(big.check(4096).is_ok());
        let err = big.check(1024).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Config);
        assert_eq!(
            err.message,
            "input[1]: the image is 2008 bytes, more than max_message_bytes (1024)"
        );
        let pdf_as_image = Input::new().image(Media::bytes(b"%PDF-1.4".to_vec(), None).unwrap());
        assert!(pdf_as_image
            .check(4096)
            .unwrap_err()
            .message
            .contains("application/pdf"));
    }

    /// The bytes decide the type; a given type only names what the bytes cannot tell.
    #[test]
    fn a_given_type_that_the_bytes_contradict_is_refused() {
        let png = b"\x89PNG\r\n\x1a\n....".to_vec();
        for (data, given, actual) in [
            (b"%PDF-1.4".to_vec(), "image/png", "application/pdf"),
            (png.clone(), "image/jpeg", "image/png"),
            (png.clone(), "application/pdf", "image/png"),
        ] {
            let err = Media::bytes(data.clone(), Some(given)).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::Config);
            assert!(
                err.message.contains(&format!("given as {given:?}"))
                    && err.message.contains(&format!("the bytes are {actual:?}")),
                "{}",
                err.message
            );
        }
        // The same through the JSON input form (the C ABI's, the CLI's), for input and
        // for a tool result's parts, which share it.
        let err = Input::from_json(
            r#"[{"type":"image","media_type":"image/png","data":"JVBERi0xLjQ="}]"#,
        )
        .unwrap_err();
        assert!(
            err.message.starts_with("input[0]: attachment: given as \"image/png\", but the bytes are \"application/pdf\""),
            "{}",
            err.message
        );
        // Agreeing, differently cased, or the `image/jpg` misspelling: the sniffed type.
        let ok = |data: &[u8], given: &str| {
            Media::bytes(data.to_vec(), Some(given))
                .unwrap()
                .media_type()
                .map(str::to_owned)
        };
        assert_eq!(ok(&png, "IMAGE/PNG").as_deref(), Some("image/png"));
        assert_eq!(
            ok(b"\xff\xd8\xff\xe0", "image/jpg").as_deref(),
            Some("image/jpeg")
        );
        // Bytes of no known type keep the given type (the provider judges them).
        assert_eq!(ok(b"BM....", "image/bmp").as_deref(), Some("image/bmp"));
    }
}
