//! A deliberately small blocking HTTP/1.1 client for the tests: it checks framing byte for
//! byte, so it must not hide anything the server sends (no pooling, no retries, no decoding
//! beyond chunked framing).

#![allow(dead_code)] // each test file uses a different subset

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use panto_testserver::TestServer;

pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Lowercased names, in order.
    pub headers: Vec<(String, String)>,
    /// Decoded body.
    pub body: Vec<u8>,
    /// For chunked responses: each HTTP chunk's data, in order (the 0-chunk excluded).
    pub chunks: Vec<Vec<u8>>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("utf-8 body")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("json body")
    }
}

impl Client {
    pub fn connect(server: &TestServer) -> Client {
        Client::connect_addr(&server.addr().to_string())
    }

    pub fn connect_addr(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        // Generous: only a broken server makes a test wait this long.
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            req.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.stream.write_all(&bytes).expect("write request");
    }

    pub fn post_json(&mut self, path: &str, body: &serde_json::Value) -> Response {
        self.send(
            "POST",
            path,
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        );
        self.read_response().expect("response")
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.send("GET", path, &[], b"");
        self.read_response().expect("response")
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 8192];
        // A signal to the test process (a child server stopping or ending) may cut a
        // read short with EINTR: that is no answer yet, read again.
        let n = loop {
            match self.stream.read(&mut tmp) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r?,
            }
        };
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    fn eof() -> io::Error {
        io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed")
    }

    fn read_line(&mut self) -> io::Result<String> {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..pos + 2).take(pos).collect();
                return Ok(String::from_utf8(line).expect("ascii line"));
            }
            if self.fill()? == 0 {
                return Err(Self::eof());
            }
        }
    }

    fn read_exact_buf(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if self.fill()? == 0 {
                return Err(Self::eof());
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads the status line and headers.
    pub fn read_head(&mut self) -> io::Result<(u16, Vec<(String, String)>)> {
        let status_line = self.read_line()?;
        let mut parts = status_line.splitn(3, ' ');
        assert_eq!(
            parts.next(),
            Some("HTTP/1.1"),
            "status line {status_line:?}"
        );
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let mut headers = Vec::new();
        loop {
            let line = self.read_line()?;
            if line.is_empty() {
                break;
            }
            let (n, v) = line.split_once(':').expect("header colon");
            headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
        }
        Ok((status, headers))
    }

    /// Reads one chunk of a chunked body; `None` for the terminating 0-chunk (trailers read).
    pub fn read_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let size_line = self.read_line()?;
        let size = usize::from_str_radix(size_line.trim(), 16).expect("hex chunk size");
        if size == 0 {
            assert_eq!(self.read_line()?, "", "no trailers expected");
            return Ok(None);
        }
        let data = self.read_exact_buf(size)?;
        assert_eq!(
            self.read_exact_buf(2)?,
            b"\r\n",
            "chunk data ends with CRLF"
        );
        Ok(Some(data))
    }

    /// Reads a full response, decoding chunked / content-length / close-delimited bodies.
    pub fn read_response(&mut self) -> io::Result<Response> {
        let (status, headers) = self.read_head()?;
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut chunks = Vec::new();
        let body = if get("transfer-encoding").as_deref() == Some("chunked") {
            while let Some(c) = self.read_chunk()? {
                chunks.push(c);
            }
            chunks.concat()
        } else if let Some(len) = get("content-length") {
            self.read_exact_buf(len.parse().expect("content-length"))?
        } else {
            self.read_to_end()?
        };
        Ok(Response {
            status,
            headers,
            body,
            chunks,
        })
    }

    /// Everything until EOF (plus what was buffered).
    pub fn read_to_end(&mut self) -> io::Result<Vec<u8>> {
        while self.fill()? > 0 {}
        Ok(std::mem::take(&mut self.buf))
    }

    /// Everything until EOF or an error; returns the bytes and the error if any.
    pub fn read_until_end_or_error(&mut self) -> (Vec<u8>, Option<io::Error>) {
        loop {
            match self.fill() {
                Ok(0) => return (std::mem::take(&mut self.buf), None),
                Ok(_) => {}
                Err(e) => return (std::mem::take(&mut self.buf), Some(e)),
            }
        }
    }

    /// Bytes received but not consumed yet.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// One request on a fresh connection.
pub fn post_json(server: &TestServer, path: &str, body: &serde_json::Value) -> Response {
    Client::connect(server).post_json(path, body)
}

/// Path of a file under the workspace's `tests/` directory.
pub fn tests_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

pub fn scenario(v: serde_json::Value) -> panto_testserver::Scenario {
    panto_testserver::Scenario::from_value(&v).expect("valid scenario")
}
