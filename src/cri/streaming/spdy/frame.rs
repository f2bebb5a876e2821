//! SPDY/3.1 frames: the in-memory form and the wire codec (draft 3.1 §2.2–2.6).
//!
//! A control frame: `1 | version(15) | type(16) | flags(8) | length(24) | payload`.
//! A data frame: `0 | stream id(31) | flags(8) | length(24) | data`.
//! Header blocks (SYN_STREAM, SYN_REPLY, HEADERS) go through the connection's stateful zlib
//! streams, so encoding and decoding need the [`FrameEncoder`] / [`FrameDecoder`] of that
//! direction.

use super::SpdyError;
use super::headers::{HeaderCompressor, HeaderDecompressor, Headers};
use tokio::io::{AsyncRead, AsyncReadExt};

pub const SPDY_VERSION: u16 = 3;
/// Largest payload a frame's 24-bit length can describe.
pub const MAX_FRAME_PAYLOAD: usize = (1 << 24) - 1;

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

const FLAG_FIN: u8 = 0x01;
const FLAG_UNIDIRECTIONAL: u8 = 0x02;
const FLAG_CLEAR_SETTINGS: u8 = 0x01;

/// RST_STREAM status codes (§2.6.3).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
}

/// GOAWAY status codes (§2.6.6).
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

/// SETTINGS ids used here (§2.6.4).
pub const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// One SETTINGS entry: flags, id (24 bits), value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        fin: bool,
        unidirectional: bool,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        clear: bool,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        fin: bool,
        data: Vec<u8>,
    },
}

/// Encodes frames for one direction of a connection.
pub struct FrameEncoder {
    headers: HeaderCompressor,
}

impl FrameEncoder {
    pub fn new() -> Result<FrameEncoder, SpdyError> {
        Ok(FrameEncoder {
            headers: HeaderCompressor::new()?,
        })
    }

    /// Appends the wire form of `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), SpdyError> {
        match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                check_len(data.len())?;
                out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
                put_flags_len(out, u8::from(*fin) * FLAG_FIN, data.len());
                out.extend_from_slice(data);
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                fin,
                unidirectional,
                headers,
            } => {
                let block = self.headers.compress(headers)?;
                let mut payload = Vec::with_capacity(10 + block.len());
                payload.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
                payload.extend_from_slice(&(associated_to & 0x7fff_ffff).to_be_bytes());
                payload.push((priority & 0x07) << 5);
                payload.push(0); // credential slot
                payload.extend_from_slice(&block);
                let flags =
                    (u8::from(*fin) * FLAG_FIN) | (u8::from(*unidirectional) * FLAG_UNIDIRECTIONAL);
                put_control(out, TYPE_SYN_STREAM, flags, &payload)?;
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            }
            | Frame::Headers {
                stream_id,
                fin,
                headers,
            } => {
                let kind = if matches!(frame, Frame::SynReply { .. }) {
                    TYPE_SYN_REPLY
                } else {
                    TYPE_HEADERS
                };
                let block = self.headers.compress(headers)?;
                let mut payload = Vec::with_capacity(4 + block.len());
                payload.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
                payload.extend_from_slice(&block);
                put_control(out, kind, u8::from(*fin) * FLAG_FIN, &payload)?;
            }
            Frame::RstStream { stream_id, status } => {
                put_control(out, TYPE_RST_STREAM, 0, &two_words(*stream_id, *status))?;
            }
            Frame::Settings { clear, entries } => {
                let mut payload = Vec::with_capacity(4 + entries.len() * 8);
                payload.extend_from_slice(&(entries.len() as u32).to_be_bytes());
                for entry in entries {
                    let id_word = (u32::from(entry.flags) << 24) | (entry.id & 0x00ff_ffff);
                    payload.extend_from_slice(&id_word.to_be_bytes());
                    payload.extend_from_slice(&entry.value.to_be_bytes());
                }
                put_control(
                    out,
                    TYPE_SETTINGS,
                    u8::from(*clear) * FLAG_CLEAR_SETTINGS,
                    &payload,
                )?;
            }
            Frame::Ping { id } => put_control(out, TYPE_PING, 0, &id.to_be_bytes())?,
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => put_control(
                out,
                TYPE_GOAWAY,
                0,
                &two_words(*last_good_stream_id, *status),
            )?,
            Frame::WindowUpdate { stream_id, delta } => put_control(
                out,
                TYPE_WINDOW_UPDATE,
                0,
                &two_words(*stream_id, delta & 0x7fff_ffff),
            )?,
        }
        Ok(())
    }
}

fn two_words(first: u32, second: u32) -> [u8; 8] {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&(first & 0x7fff_ffff).to_be_bytes());
    bytes[4..].copy_from_slice(&second.to_be_bytes());
    bytes
}

fn check_len(len: usize) -> Result<(), SpdyError> {
    if len > MAX_FRAME_PAYLOAD {
        return Err(SpdyError::Protocol(
            "frame payload longer than 2^24-1 bytes",
        ));
    }
    Ok(())
}

fn put_flags_len(out: &mut Vec<u8>, flags: u8, len: usize) {
    let word = (u32::from(flags) << 24) | (len as u32 & 0x00ff_ffff);
    out.extend_from_slice(&word.to_be_bytes());
}

fn put_control(out: &mut Vec<u8>, kind: u16, flags: u8, payload: &[u8]) -> Result<(), SpdyError> {
    check_len(payload.len())?;
    out.extend_from_slice(&(0x8000 | SPDY_VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    put_flags_len(out, flags, payload.len());
    out.extend_from_slice(payload);
    Ok(())
}

/// Decodes frames for one direction of a connection.
#[derive(Default)]
pub struct FrameDecoder {
    headers: HeaderDecompressor,
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Reads the next frame; `Ok(None)` at a clean end of input (EOF between frames).
    /// Unknown control frame types are skipped, as the spec asks.
    pub async fn read<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Option<Frame>, SpdyError> {
        loop {
            let mut head = [0u8; 8];
            match reader.read_exact(&mut head[..1]).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(SpdyError::Io(e)),
            }
            reader.read_exact(&mut head[1..]).await?;
            let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let flags = head[4];
            let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
            let mut payload = vec![0u8; len];
            reader.read_exact(&mut payload).await?;
            if first & 0x8000_0000 == 0 {
                return Ok(Some(Frame::Data {
                    stream_id: first & 0x7fff_ffff,
                    fin: flags & FLAG_FIN != 0,
                    data: payload,
                }));
            }
            let kind = (first & 0xffff) as u16;
            if let Some(frame) = self.decode_control(kind, flags, &payload)? {
                return Ok(Some(frame));
            }
        }
    }

    /// Decodes a control frame payload; `None` for unknown types.
    pub fn decode_control(
        &mut self,
        kind: u16,
        flags: u8,
        payload: &[u8],
    ) -> Result<Option<Frame>, SpdyError> {
        let fin = flags & FLAG_FIN != 0;
        let frame = match kind {
            TYPE_SYN_STREAM => {
                need(payload, 10)?;
                Frame::SynStream {
                    stream_id: word(payload, 0),
                    associated_to: word(payload, 4),
                    priority: payload[8] >> 5,
                    fin,
                    unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                    headers: self.headers.decompress(&payload[10..])?,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                need(payload, 4)?;
                let stream_id = word(payload, 0);
                let headers = self.headers.decompress(&payload[4..])?;
                if kind == TYPE_SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        fin,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        fin,
                        headers,
                    }
                }
            }
            TYPE_RST_STREAM => {
                exactly(payload, 8)?;
                Frame::RstStream {
                    stream_id: word(payload, 0),
                    status: u32_at(payload, 4),
                }
            }
            TYPE_SETTINGS => {
                need(payload, 4)?;
                let count = u32_at(payload, 0) as usize;
                if payload.len() != 4 + count.saturating_mul(8) {
                    return Err(SpdyError::Protocol(
                        "SETTINGS length does not match its count",
                    ));
                }
                let entries = (0..count)
                    .map(|i| {
                        let id_word = u32_at(payload, 4 + i * 8);
                        Setting {
                            flags: (id_word >> 24) as u8,
                            id: id_word & 0x00ff_ffff,
                            value: u32_at(payload, 8 + i * 8),
                        }
                    })
                    .collect();
                Frame::Settings {
                    clear: flags & FLAG_CLEAR_SETTINGS != 0,
                    entries,
                }
            }
            TYPE_PING => {
                exactly(payload, 4)?;
                Frame::Ping {
                    id: u32_at(payload, 0),
                }
            }
            TYPE_GOAWAY => {
                exactly(payload, 8)?;
                Frame::GoAway {
                    last_good_stream_id: word(payload, 0),
                    status: u32_at(payload, 4),
                }
            }
            TYPE_WINDOW_UPDATE => {
                exactly(payload, 8)?;
                Frame::WindowUpdate {
                    stream_id: word(payload, 0),
                    delta: word(payload, 4),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(frame))
    }
}

fn need(payload: &[u8], len: usize) -> Result<(), SpdyError> {
    if payload.len() < len {
        return Err(SpdyError::Protocol("control frame too short"));
    }
    Ok(())
}

fn exactly(payload: &[u8], len: usize) -> Result<(), SpdyError> {
    if payload.len() != len {
        return Err(SpdyError::Protocol("control frame has the wrong length"));
    }
    Ok(())
}

fn u32_at(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([
        payload[at],
        payload[at + 1],
        payload[at + 2],
        payload[at + 3],
    ])
}

/// A 31-bit field (stream ids, window deltas): the top bit is reserved.
fn word(payload: &[u8], at: usize) -> u32 {
    u32_at(payload, at) & 0x7fff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(frames: &[Frame]) -> Vec<Frame> {
        let mut encoder = FrameEncoder::new().unwrap();
        let mut wire = Vec::new();
        for frame in frames {
            encoder.encode(frame, &mut wire).unwrap();
        }
        let mut decoder = FrameDecoder::new();
        let mut reader = wire.as_slice();
        let mut out = Vec::new();
        while let Some(frame) = decoder.read(&mut reader).await.unwrap() {
            out.push(frame);
        }
        out
    }

    #[tokio::test]
    async fn every_frame_type_round_trips() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers: Headers::new().with("streamtype", "error"),
            },
            Frame::SynReply {
                stream_id: 1,
                fin: false,
                headers: Headers::new(),
            },
            Frame::Data {
                stream_id: 3,
                fin: true,
                data: b"hello".to_vec(),
            },
            Frame::RstStream {
                stream_id: 5,
                status: rst::CANCEL,
            },
            Frame::Settings {
                clear: false,
                entries: vec![Setting {
                    flags: 0,
                    id: SETTINGS_INITIAL_WINDOW_SIZE,
                    value: 65536,
                }],
            },
            Frame::Ping { id: 7 },
            Frame::GoAway {
                last_good_stream_id: 9,
                status: goaway::OK,
            },
            Frame::Headers {
                stream_id: 1,
                fin: true,
                headers: Headers::new().with("a", "b"),
            },
            Frame::WindowUpdate {
                stream_id: 0,
                delta: 1 << 20,
            },
        ];
        assert_eq!(round_trip(&frames).await, frames);
    }

    #[tokio::test]
    async fn data_and_ping_frames_have_the_spec_layout() {
        let mut encoder = FrameEncoder::new().unwrap();
        let mut wire = Vec::new();
        let data = Frame::Data {
            stream_id: 3,
            fin: true,
            data: b"hi".to_vec(),
        };
        encoder.encode(&data, &mut wire).unwrap();
        assert_eq!(wire, [0, 0, 0, 3, 1, 0, 0, 2, b'h', b'i']);
        wire.clear();
        encoder.encode(&Frame::Ping { id: 1 }, &mut wire).unwrap();
        assert_eq!(wire, [0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]);
    }

    #[tokio::test]
    async fn unknown_control_frames_are_skipped_and_truncation_is_an_error() {
        // A CREDENTIAL frame (type 10), then a PING.
        let wire = [
            0x80, 3, 0, 10, 0, 0, 0, 2, 0xaa, 0xbb, 0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 5,
        ];
        let mut decoder = FrameDecoder::new();
        let mut reader = &wire[..];
        assert_eq!(
            decoder.read(&mut reader).await.unwrap(),
            Some(Frame::Ping { id: 5 })
        );
        let truncated = [0x80, 3, 0, 6, 0, 0, 0, 4, 0];
        let mut reader = &truncated[..];
        assert!(FrameDecoder::new().read(&mut reader).await.is_err());
        let bad_ping = [0x80, 3, 0, 6, 0, 0, 0, 2, 0, 0];
        let mut reader = &bad_ping[..];
        assert!(FrameDecoder::new().read(&mut reader).await.is_err());
    }
}
