use super::*;
use loona_hpack::Encoder;

type Headers = Vec<(Vec<u8>, Vec<u8>)>;

fn request(authority: &str) -> Headers {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/runtime.v1.RuntimeService/Version"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("user-agent", "grpc-go/1.26.0"),
    ]
    .iter()
    .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect()
}

fn with_authority(headers: &Headers, authority: &str) -> Headers {
    let mut headers = headers.clone();
    for (name, value) in &mut headers {
        if name == b":authority" {
            *value = authority.as_bytes().to_vec();
        }
    }
    headers
}

/// A client's encoder (it indexes, so later blocks refer to the dynamic table).
fn encode(encoder: &mut Encoder<'static>, headers: &Headers) -> Vec<u8> {
    encoder.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])))
}

fn raw_frame(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame_header(&mut out, payload.len(), frame_type, flags, stream);
    out.extend_from_slice(payload);
    out
}

struct Frame {
    frame_type: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// The frames after the preface.
fn parse(bytes: &[u8]) -> Vec<Frame> {
    assert!(bytes.starts_with(PREFACE), "preface kept");
    let mut rest = &bytes[PREFACE.len()..];
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let len = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
        frames.push(Frame {
            frame_type: rest[3],
            flags: rest[4],
            stream: u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]),
            payload: rest[9..9 + len].to_vec(),
        });
        rest = &rest[9 + len..];
    }
    frames
}

/// The header lists of the output, as a server's decoder sees them.
fn decoded_blocks(frames: &[Frame]) -> Vec<(u32, Headers)> {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let mut block = Vec::new();
    for f in frames {
        if f.frame_type == TYPE_HEADERS || f.frame_type == TYPE_CONTINUATION {
            let skip = if f.flags & FLAG_PRIORITY != 0 && f.frame_type == TYPE_HEADERS {
                5
            } else {
                0
            };
            assert_eq!(f.flags & FLAG_PADDED, 0, "no padding written");
            assert!(f.payload.len() <= MAX_FRAME_PAYLOAD);
            block.extend_from_slice(&f.payload[skip..]);
            if f.flags & FLAG_END_HEADERS != 0 {
                out.push((f.stream, decoder.decode(&block).expect("decodes")));
                block.clear();
            }
        }
    }
    out
}

fn run_in_pieces(input: &[u8], piece: usize) -> Result<Vec<u8>, RewriteError> {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    for chunk in input.chunks(piece) {
        rewriter.feed(chunk, &mut out)?;
    }
    Ok(out)
}

#[test]
fn authorities_h2_refuses_are_detected() {
    let table = [
        ("localhost", true),
        ("127.0.0.1:10010", true),
        ("[::1]:80", true),
        ("runp.sock", true),
        ("/run/runp/runp.sock", false),
        ("unix:///run/runp/runp.sock", false),
        ("unix:/run/containerd/containerd.sock", false),
        ("", false),
        ("with space", false),
    ];
    for (authority, valid) in table {
        assert_eq!(
            valid_authority(authority.as_bytes()),
            valid,
            "{authority:?}"
        );
    }
}

#[test]
fn header_blocks_get_a_valid_authority_and_keep_everything_else() {
    let mut encoder = Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(raw_frame(0x4, 0, 0, &[0, 4, 0, 0, 0xff, 0xff])); // SETTINGS
    let cases = [
        ("/run/runp/runp.sock", "localhost"),
        ("unix:///run/runp/runp.sock", "localhost"),
        ("localhost:1234", "localhost:1234"),
        // The same again: now from the client's dynamic table.
        ("/run/runp/runp.sock", "localhost"),
    ];
    let mut expected = Vec::new();
    for (i, (sent, seen)) in cases.iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        let headers = request(sent);
        let block = encode(&mut encoder, &headers);
        input.extend(raw_frame(TYPE_HEADERS, FLAG_END_HEADERS, stream, &block));
        input.extend(raw_frame(0x0, FLAG_END_STREAM, stream, b"\0\0\0\0\0"));
        expected.push((stream, with_authority(&headers, seen)));
    }
    input.extend(raw_frame(0x8, 0, 0, &[0, 0, 1, 0])); // WINDOW_UPDATE
    for piece in [1, 7, 9, 4096] {
        let out = run_in_pieces(&input, piece).expect("rewrites");
        let frames = parse(&out);
        assert_eq!(decoded_blocks(&frames), expected, "pieces of {piece}");
        let kinds: Vec<(u8, u8, u32)> = frames
            .iter()
            .map(|f| (f.frame_type, f.flags, f.stream))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (0x4, 0, 0),
                (TYPE_HEADERS, FLAG_END_HEADERS, 1),
                (0x0, FLAG_END_STREAM, 1),
                (TYPE_HEADERS, FLAG_END_HEADERS, 3),
                (0x0, FLAG_END_STREAM, 3),
                (TYPE_HEADERS, FLAG_END_HEADERS, 5),
                (0x0, FLAG_END_STREAM, 5),
                (TYPE_HEADERS, FLAG_END_HEADERS, 7),
                (0x0, FLAG_END_STREAM, 7),
                (0x8, 0, 0),
            ]
        );
        assert_eq!(frames[2].payload, b"\0\0\0\0\0", "DATA untouched");
    }
    let mut rewriter = Rewriter::new();
    rewriter.feed(&input, &mut Vec::new()).expect("rewrites");
    assert_eq!(rewriter.rewritten(), 3);
}

#[test]
fn padding_priority_continuation_and_end_stream_survive() {
    let mut encoder = Encoder::new();
    let headers = request("/run/runp/runp.sock");
    let block = encode(&mut encoder, &headers);
    let (a, b) = block.split_at(10);
    let mut payload = vec![3]; // pad length
    payload.extend_from_slice(&[0x80, 0, 0, 3, 15]); // exclusive dependency on 3, weight 15
    payload.extend_from_slice(a);
    payload.extend_from_slice(&[0, 0, 0]);
    let mut input = PREFACE.to_vec();
    let flags = FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM;
    input.extend(raw_frame(TYPE_HEADERS, flags, 5, &payload));
    input.extend(raw_frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 5, b));
    let frames = parse(&run_in_pieces(&input, 3).expect("rewrites"));
    assert_eq!(frames.len(), 1);
    assert_eq!(
        frames[0].flags,
        FLAG_PRIORITY | FLAG_END_STREAM | FLAG_END_HEADERS
    );
    assert_eq!(&frames[0].payload[..5], &[0x80, 0, 0, 3, 15]);
    assert_eq!(
        decoded_blocks(&frames),
        vec![(5, with_authority(&headers, "localhost"))]
    );
}

#[test]
fn blocks_too_big_for_one_frame_are_split_into_continuations() {
    let mut headers = request("/run/runp/runp.sock");
    headers.push((b"x-big".to_vec(), vec![b'v'; 40_000]));
    let mut input = PREFACE.to_vec();
    let block = encode(&mut Encoder::new(), &headers);
    let (first, rest) = block.split_at(MAX_FRAME_PAYLOAD);
    input.extend(raw_frame(TYPE_HEADERS, FLAG_END_STREAM, 1, first));
    for (i, chunk) in rest.chunks(MAX_FRAME_PAYLOAD).enumerate() {
        let last = (i + 1) * MAX_FRAME_PAYLOAD >= rest.len();
        let flags = if last { FLAG_END_HEADERS } else { 0 };
        input.extend(raw_frame(TYPE_CONTINUATION, flags, 1, chunk));
    }
    let frames = parse(&run_in_pieces(&input, 1000).expect("rewrites"));
    let kinds: Vec<(u8, u8)> = frames.iter().map(|f| (f.frame_type, f.flags)).collect();
    assert_eq!(
        kinds,
        vec![
            (TYPE_HEADERS, FLAG_END_STREAM),
            (TYPE_CONTINUATION, 0),
            (TYPE_CONTINUATION, FLAG_END_HEADERS),
        ]
    );
    assert_eq!(
        decoded_blocks(&frames),
        vec![(1, with_authority(&headers, "localhost"))]
    );
}

#[test]
fn what_is_not_http2_passes_untouched() {
    for input in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &b"PRI * HTTP/1.1 nope, not a preface at all"[..],
        &b""[..],
    ] {
        assert_eq!(run_in_pieces(input, 5).expect("passes"), input);
    }
    // A preface cut short is forwarded as far as it came.
    assert_eq!(run_in_pieces(&PREFACE[..10], 3).unwrap(), &PREFACE[..10]);
}

#[test]
fn broken_header_blocks_close_the_connection() {
    let good = encode(&mut Encoder::new(), &request("localhost"));
    let with = |frames: &[Vec<u8>]| {
        let mut input = PREFACE.to_vec();
        frames.iter().for_each(|f| input.extend_from_slice(f));
        input
    };
    // One literal of 4000 bytes indexed, then referenced over and over: decodes to far more
    // than the block's size.
    let mut bomb = vec![0x40, 0x01, b'x'];
    let _ = encode_integer_into(4000, 7, 0, &mut bomb);
    bomb.extend(std::iter::repeat_n(b'y', 4000));
    bomb.extend(std::iter::repeat_n(0x80 | 62, 100));
    let cases: Vec<(Vec<u8>, RewriteError)> = vec![
        (
            with(&[raw_frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &good)]),
            RewriteError::UnexpectedContinuation(1),
        ),
        (
            with(&[
                raw_frame(TYPE_HEADERS, 0, 1, &good),
                raw_frame(0x0, 0, 1, b"data"),
            ]),
            RewriteError::ContinuationExpected {
                stream: 1,
                frame_type: 0,
            },
        ),
        (
            with(&[
                raw_frame(TYPE_HEADERS, 0, 1, &good),
                raw_frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, &good),
            ]),
            RewriteError::UnexpectedContinuation(3),
        ),
        (
            with(&[raw_frame(TYPE_HEADERS, FLAG_PADDED, 1, &[200, 1, 2])]),
            RewriteError::BadHeadersFrame(1),
        ),
        (
            with(&[raw_frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0xff, 0xff])]),
            RewriteError::Hpack("Integer decoding error: Not enough octets in the buffer".into()),
        ),
        (
            with(&[raw_frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &bomb)]),
            RewriteError::DecodedTooLarge,
        ),
        (
            with(&[
                raw_frame(TYPE_HEADERS, 0, 1, &vec![0; MAX_FRAME_PAYLOAD]),
                raw_frame(TYPE_CONTINUATION, 0, 1, &vec![0; MAX_BLOCK_BYTES]),
            ]),
            RewriteError::BlockTooLarge,
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            run_in_pieces(&input, 100).err(),
            Some(want.clone()),
            "{want}"
        );
    }
}

#[test]
fn static_table_references_decode_to_the_same_fields() {
    for (name, value) in crate::cri::authority::hpack_static::STATIC_TABLE {
        for value in [value, "other"] {
            let mut block = Vec::new();
            encode_literal(name.as_bytes(), value.as_bytes(), &mut block);
            let decoded = Decoder::new().decode(&block).expect("decodes");
            assert_eq!(
                decoded,
                vec![(name.as_bytes().to_vec(), value.as_bytes().to_vec())],
                "{name}: {value}"
            );
        }
    }
    let mut block = Vec::new();
    encode_literal(b"te", b"trailers", &mut block);
    assert_eq!(block, b"\x00\x02te\x08trailers");
}
