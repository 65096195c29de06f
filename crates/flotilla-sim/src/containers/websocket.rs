//! The server side of a WebSocket (RFC 6455), as much as exec needs: the opening handshake's
//! answer (`Sec-WebSocket-Accept`, the subprotocol chosen from the client's list), reading the
//! client's frames (masked; fragmented messages reassembled; control frames between them) and
//! writing the server's (unmasked, whole). No extensions (no compression), no TLS of its own:
//! it runs on the connection the API server hands over.

use axum::http::HeaderMap;
use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Appended to the client's key before hashing (RFC 6455 section 1.3).
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The largest message a client may send (stdin arrives in small chunks; this bounds memory).
const MAX_MESSAGE: usize = 16 << 20;

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// Close status codes the server sends.
pub const CLOSE_NORMAL: u16 = 1000;
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;

/// `Sec-WebSocket-Accept` for the client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, format!("{}{ACCEPT_GUID}", key.trim()).as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// The opening handshake's answer: the accept key and the subprotocol, the first of the
/// client's (in its order) that the server speaks.
#[derive(Debug, PartialEq, Eq)]
pub struct Handshake {
    pub accept: String,
    pub protocol: String,
}

/// Check a client's opening handshake; the error is the message of a 400.
pub fn handshake(headers: &HeaderMap, supported: &[&str]) -> Result<Handshake, String> {
    let version = headers.get("sec-websocket-version").and_then(|v| v.to_str().ok()).unwrap_or("");
    if version.trim() != "13" {
        return Err(format!("unsupported WebSocket version {version:?}: want 13"));
    }
    let key = headers
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.trim().is_empty())
        .ok_or("the WebSocket handshake has no Sec-WebSocket-Key")?;
    let asked: Vec<&str> = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let protocol = asked
        .iter()
        .find(|p| supported.contains(p))
        .ok_or_else(|| format!("requested protocol(s) are not supported: [{}]; supports [{}]", asked.join(" "), supported.join(" ")))?;
    Ok(Handshake { accept: accept_key(key), protocol: protocol.to_string() })
}

/// A whole message or a control frame from the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    Binary(Vec<u8>),
    Text(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    Close,
}

/// Reads the client's messages off a connection.
pub struct Reader<R> {
    io: R,
    /// A fragmented message being reassembled: its opcode and what has come so far.
    partial: Option<(u8, Vec<u8>)>,
}

fn protocol_error(m: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string())
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(io: R) -> Reader<R> {
        Reader { io, partial: None }
    }

    /// The next message; `None` when the connection ends between frames.
    pub async fn next(&mut self) -> std::io::Result<Option<Message>> {
        loop {
            let mut head = [0u8; 2];
            match self.io.read_exact(&mut head).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
            let fin = head[0] & 0x80 != 0;
            if head[0] & 0x70 != 0 {
                return Err(protocol_error("reserved bits set (no extension was negotiated)"));
            }
            let opcode = head[0] & 0x0f;
            let masked = head[1] & 0x80 != 0;
            let len = match head[1] & 0x7f {
                126 => u64::from(self.io.read_u16().await?),
                127 => self.io.read_u64().await?,
                n => u64::from(n),
            };
            let control = opcode & 0x8 != 0;
            if control && (len > 125 || !fin) {
                return Err(protocol_error("a control frame must be whole and at most 125 bytes"));
            }
            let sofar = self.partial.as_ref().map_or(0, |(_, b)| b.len());
            if len > (MAX_MESSAGE - sofar) as u64 {
                return Err(protocol_error("message too large"));
            }
            let mut mask = [0u8; 4];
            if masked {
                self.io.read_exact(&mut mask).await?;
            }
            let mut payload = vec![0u8; len as usize];
            self.io.read_exact(&mut payload).await?;
            if masked {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= mask[i % 4];
                }
            }
            match opcode {
                OP_CLOSE => return Ok(Some(Message::Close)),
                OP_PING => return Ok(Some(Message::Ping(payload))),
                OP_PONG => return Ok(Some(Message::Pong)),
                OP_TEXT | OP_BINARY => {
                    if self.partial.is_some() {
                        return Err(protocol_error("a new message began before the last one ended"));
                    }
                    if !fin {
                        self.partial = Some((opcode, payload));
                        continue;
                    }
                    return Ok(Some(whole(opcode, payload)));
                }
                OP_CONTINUATION => {
                    let Some((op, mut data)) = self.partial.take() else { return Err(protocol_error("a continuation frame with no message to continue")) };
                    data.extend_from_slice(&payload);
                    if !fin {
                        self.partial = Some((op, data));
                        continue;
                    }
                    return Ok(Some(whole(op, data)));
                }
                _ => return Err(protocol_error("unknown opcode")),
            }
        }
    }
}

fn whole(opcode: u8, data: Vec<u8>) -> Message {
    if opcode == OP_TEXT { Message::Text(data) } else { Message::Binary(data) }
}

/// One whole, unmasked frame as the server sends it.
pub fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(payload.len() + 10);
    f.push(0x80 | opcode);
    match payload.len() {
        n @ 0..=125 => f.push(n as u8),
        n @ 126..=0xffff => {
            f.push(126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(payload);
    f
}

/// A close frame with a status code.
pub fn close_frame(code: u16) -> Vec<u8> {
    frame(OP_CLOSE, &code.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as a client sends it: masked.
    fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut f = frame(opcode, &[]);
        f.truncate(1);
        if !fin {
            f[0] &= 0x7f;
        }
        match payload.len() {
            n @ 0..=125 => f.push(0x80 | n as u8),
            n => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    #[test]
    fn the_accept_key_is_rfc_6455s() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn the_subprotocol_is_the_clients_first_the_server_speaks() {
        let mut h = HeaderMap::new();
        h.insert("sec-websocket-version", "13".parse().unwrap());
        h.insert("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap());
        h.append("sec-websocket-protocol", "v5.channel.k8s.io, base64.channel.k8s.io".parse().unwrap());
        h.append("sec-websocket-protocol", "v4.channel.k8s.io".parse().unwrap());
        assert_eq!(handshake(&h, &["v4.channel.k8s.io", "v5.channel.k8s.io"]).unwrap().protocol, "v5.channel.k8s.io");
        assert_eq!(
            handshake(&h, &["channel.k8s.io"]).unwrap_err(),
            "requested protocol(s) are not supported: [v5.channel.k8s.io base64.channel.k8s.io v4.channel.k8s.io]; supports [channel.k8s.io]"
        );
        h.remove("sec-websocket-key");
        assert!(handshake(&h, &["v5.channel.k8s.io"]).unwrap_err().contains("Sec-WebSocket-Key"));
        h.insert("sec-websocket-version", "8".parse().unwrap());
        assert!(handshake(&h, &["v5.channel.k8s.io"]).unwrap_err().contains("version"));
    }

    #[tokio::test]
    async fn messages_are_unmasked_reassembled_and_interleaved_with_control_frames() {
        let big = vec![7u8; 300];
        let mut wire = client_frame(true, OP_BINARY, b"\x00hello");
        wire.extend(client_frame(false, OP_BINARY, b"\x01par"));
        wire.extend(client_frame(true, OP_PING, b"hb"));
        wire.extend(client_frame(true, OP_CONTINUATION, b"ts"));
        wire.extend(client_frame(true, OP_BINARY, &big));
        wire.extend(client_frame(true, OP_CLOSE, &1000u16.to_be_bytes()));
        let mut r = Reader::new(&wire[..]);
        assert_eq!(r.next().await.unwrap(), Some(Message::Binary(b"\x00hello".to_vec())));
        assert_eq!(r.next().await.unwrap(), Some(Message::Ping(b"hb".to_vec())));
        assert_eq!(r.next().await.unwrap(), Some(Message::Binary(b"\x01parts".to_vec())));
        assert_eq!(r.next().await.unwrap(), Some(Message::Binary(big)));
        assert_eq!(r.next().await.unwrap(), Some(Message::Close));
        assert_eq!(r.next().await.unwrap(), None);
        let bad = client_frame(true, OP_CONTINUATION, b"x");
        assert!(Reader::new(&bad[..]).next().await.is_err());
    }

    #[test]
    fn server_frames_are_whole_and_unmasked() {
        assert_eq!(frame(OP_BINARY, b"\x01hi"), b"\x82\x03\x01hi");
        let f = frame(OP_BINARY, &[0u8; 200]);
        assert_eq!(&f[..4], &[0x82, 126, 0, 200]);
        assert_eq!(f.len(), 204);
        assert_eq!(frame(OP_BINARY, &vec![0u8; 70000])[1], 127);
        assert_eq!(close_frame(CLOSE_NORMAL), b"\x88\x02\x03\xe8");
    }
}
