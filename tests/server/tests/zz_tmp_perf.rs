use std::io::{Read, Write};
use panto_testserver::{Scenario, TestServer};
#[test]
fn perf() {
    let s = Scenario::from_json(r#"{"exchanges":[{"times":5,"response":{"repeat":{"count":100000,"chunk":{"data":{"choices":[{"index":0,"delta":{"content":"tok"}}]}}},"sse":[{"data":"[DONE]"}]}}]}"#).unwrap();
    let server = TestServer::start(s).unwrap();
    let mut c = std::net::TcpStream::connect(server.addr()).unwrap();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        c.write_all(b"GET / HTTP/1.1\r\nconnection: close\r\n\r\n").unwrap();
        let mut v = Vec::new();
        c.read_to_end(&mut v).unwrap();
        println!("{} bytes in {:?}", v.len(), t.elapsed());
        c = std::net::TcpStream::connect(server.addr()).unwrap();
    }
}
