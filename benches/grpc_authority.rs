//! What the `:authority` adapter of the CRI socket (`runp::cri::authority`) costs per RPC:
//! the same tonic server (the gRPC health service, which answers at once) on two unix
//! sockets, one through `AuthorityFix` and one straight to h2, and one tonic client on each,
//! calls interleaved in blocks; medians of the per-call times, and their difference. Then the
//! rewriter alone: nanoseconds to rewrite one typical request (HEADERS with the socket path as
//! `:authority`, indexed as grpc-go indexes, plus its DATA frame).
//!
//! Usage: grpc_authority [--calls N] [--control]   (run by scripts/bench-grpc-authority.sh)

#[path = "support/mod.rs"]
mod support;

use futures::TryStreamExt;
use runp::cri::authority::AuthorityFix;
use runp::cri::authority::rewrite::{PREFACE, Rewriter};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{arg, flag, percentile, smoke};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const BLOCK: usize = 100;

fn serve(path: &Path, fix: bool) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let incoming = UnixListenerStream::new(UnixListener::bind(path)?);
    let (_reporter, health) = tonic_health::server::health_reporter();
    let router = Server::builder().add_service(health);
    Ok(tokio::spawn(async move {
        let result = if fix {
            router
                .serve_with_incoming(incoming.map_ok(AuthorityFix::new))
                .await
        } else {
            router.serve_with_incoming(incoming).await
        };
        if let Err(err) = result {
            eprintln!("grpc_authority: server failed: {err}");
        }
    }))
}

async fn client(path: &Path) -> anyhow::Result<HealthClient<Channel>> {
    let channel = Endpoint::from_shared(format!("unix:{}", path.display()))?
        .connect()
        .await?;
    Ok(HealthClient::new(channel))
}

async fn timed(client: &mut HealthClient<Channel>, out: &mut Vec<Duration>) -> anyhow::Result<()> {
    let started = Instant::now();
    client.check(HealthCheckRequest::default()).await?;
    out.push(started.elapsed());
    Ok(())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One request as an old grpc-go client sends it, after the first (its headers indexed).
fn typical_request(socket: &str) -> (Vec<u8>, Vec<u8>) {
    let mut encoder = loona_hpack::Encoder::new();
    let headers: [(&[u8], &[u8]); 7] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/runtime.v1.RuntimeService/Version"),
        (b":authority", socket.as_bytes()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"user-agent", b"grpc-go/1.26.0"),
    ];
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend([kind, flags]);
        out.extend(stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    };
    let mut first = PREFACE.to_vec();
    first.extend(frame(0x4, 0, 0, &[]));
    first.extend(frame(0x1, 0x4, 1, &encoder.encode(headers)));
    first.extend(frame(0x0, 0x1, 1, b"\0\0\0\0\x04\n\x02v1"));
    let mut next = frame(0x1, 0x4, 3, &encoder.encode(headers));
    next.extend(frame(0x0, 0x1, 3, b"\0\0\0\0\x04\n\x02v1"));
    (first, next)
}

fn main() -> anyhow::Result<()> {
    // RUST_LOG=runp=debug shows what the adapter does (nothing is logged by default).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let calls: usize = match arg("--calls") {
        Some(n) => n.parse()?,
        None if smoke() => 2 * BLOCK,
        None => 20_000,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let (with, without) = (dir.path().join("fix.sock"), dir.path().join("raw.sock"));
    let (mut fixed, mut raw) = runtime.block_on(async {
        serve(&with, true)?;
        // --control: the adapter on both sockets, to see the noise between the two.
        serve(&without, flag("--control"))?;
        anyhow::Ok((client(&with).await?, client(&without).await?))
    })?;
    let (mut t_fixed, mut t_raw) = (Vec::new(), Vec::new());
    runtime.block_on(async {
        // Warm both connections up before measuring.
        for _ in 0..BLOCK {
            fixed.check(HealthCheckRequest::default()).await?;
            raw.check(HealthCheckRequest::default()).await?;
        }
        for round in 0..calls.div_ceil(BLOCK) {
            // Each side goes first every other round.
            for side in [round % 2, 1 - round % 2] {
                for _ in 0..BLOCK {
                    match side {
                        0 => timed(&mut fixed, &mut t_fixed).await?,
                        _ => timed(&mut raw, &mut t_raw).await?,
                    }
                }
            }
        }
        anyhow::Ok(())
    })?;
    t_fixed.sort();
    t_raw.sort();
    let (m_fixed, m_raw) = (percentile(&t_fixed, 0.5), percentile(&t_raw, 0.5));
    println!(
        "unary RPC over a unix socket, {} calls each: with the adapter median {:.1} µs (p90 {:.1}), without {:.1} µs (p90 {:.1})",
        t_fixed.len(),
        micros(m_fixed),
        micros(percentile(&t_fixed, 0.9)),
        micros(m_raw),
        micros(percentile(&t_raw, 0.9)),
    );
    println!(
        "ADDED_PER_RPC_US={:.1} ({:+.1} % of the median RPC)",
        micros(m_fixed) - micros(m_raw),
        (m_fixed.as_secs_f64() / m_raw.as_secs_f64() - 1.0) * 100.0
    );
    println!(
        "MEDIAN_US_WITH={:.1} MEDIAN_US_WITHOUT={:.1}",
        micros(m_fixed),
        micros(m_raw)
    );

    let socket: PathBuf = "/run/runp/runp.sock".into();
    let (first, next) = typical_request(socket.to_str().unwrap_or_default());
    let mut out = Vec::with_capacity(4096);
    let rounds = if smoke() { 1_000 } else { 200_000 };
    let started = Instant::now();
    for _ in 0..rounds {
        out.clear();
        // A fresh connection each round: the second request refers to the first's fields.
        let mut r = Rewriter::new();
        r.feed(&first, &mut out)?;
        r.feed(&next, &mut out)?;
    }
    let per = started.elapsed().as_secs_f64() * 1e9 / f64::from(rounds);
    println!(
        "rewriter alone: {per:.0} ns for a connection's preface + 2 requests ({} + {} bytes in, literals without Huffman)",
        first.len(),
        next.len()
    );
    Ok(())
}
