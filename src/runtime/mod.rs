//! The CRI `RuntimeService` implemented over sandboxed processes.
