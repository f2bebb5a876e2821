//! Generates the CRI `runtime.v1` types, gRPC servers and clients from the vendored api.proto.
//! protox parses the proto in pure Rust, so a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "src/cri/proto/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["src/cri/proto"])?;
    tonic_prost_build::configure()
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .compile_fds(descriptors)?;
    Ok(())
}
