//! Whole images to and from byte streams (`shoal rbd export|import`), sparse both ways: chunks
//! that are all zeros are neither written to a seekable destination nor to the image.
//!
//! Durability: [`export`] returns once every chunk was handed to the destination (the caller
//! syncs a file); [`import`] returns once every written chunk is durable on every replica (each
//! image write is).

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

use futures::StreamExt;

use crate::error::RbdError;
use crate::image::Image;
use crate::manage::Progress;

/// Bytes moved per chunk: one default object, so a chunk is usually one cluster operation.
pub const CHUNK_BYTES: u64 = 4 << 20;
/// Chunks in flight at once (bounds memory to this many chunks).
pub const CHUNKS_IN_FLIGHT: usize = 4;

/// Where an export goes.
pub enum Sink<'a> {
    /// A file, sized to the image first; all-zero chunks are skipped (left as holes).
    File(&'a std::fs::File),
    /// A stream (stdout): every byte is written, zeros included.
    Stream(&'a mut dyn Write),
}

/// What a transfer moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    pub size_bytes: u64,
    /// Bytes of chunks that held data (the rest were zeros, skipped where the sink allowed).
    pub data_bytes: u64,
}

fn io_error(what: &str, e: &std::io::Error) -> RbdError {
    RbdError::Io(format!("{what}: {e}"))
}

/// Objects an export to a file looks up before reading (about 40 MiB of bookkeeping at most);
/// an image holding more is read whole.
pub const EXPORT_HELD_OBJECTS_MAX: usize = 1 << 20;

/// Copies `image` (or the snapshot it was opened at) to `sink`; `progress` gets bytes done of
/// the image's size. To a file, only the ranges the image holds objects for are read
/// ([`Image::ranges_held`]): the rest stays a hole, so a thin image exports in the time its data
/// takes rather than its provisioned size.
pub async fn export(image: &Image, sink: Sink<'_>, progress: Progress<'_>) -> Result<Transferred, RbdError> {
    let size = image.size_bytes();
    let held = match &sink {
        Sink::File(_) => image.ranges_held(EXPORT_HELD_OBJECTS_MAX).await?,
        Sink::Stream(_) => None,
    };
    let held = held.unwrap_or_else(|| vec![(0, size)]);
    // Chunks of CHUNK_BYTES (aligned, so a stream gets the same sequence as before) that meet a
    // held range, in order.
    let chunks = held.into_iter().flat_map(|(offset, len)| {
        let first = offset / CHUNK_BYTES;
        let end = (offset + len).div_ceil(CHUNK_BYTES);
        first..end
    });
    let mut last_chunk: Option<u64> = None;
    let chunks = chunks.filter(move |i| {
        // Runs may share a chunk at their ends.
        let fresh = last_chunk.is_none_or(|l| *i > l);
        last_chunk = Some(*i);
        fresh
    });
    let mut reads = futures::stream::iter(chunks.map(|i| {
        let offset = i * CHUNK_BYTES;
        let len = CHUNK_BYTES.min(size - offset);
        async move { image.read(offset, len).await.map(|b| (offset, b)) }
    }))
    // In order, so a stream sink gets bytes in sequence; reads still overlap.
    .buffered(CHUNKS_IN_FLIGHT);
    let mut out = Transferred { size_bytes: size, data_bytes: 0 };
    let mut sink = sink;
    if let Sink::File(f) = &sink {
        f.set_len(size).map_err(|e| io_error("sizing the destination file", &e))?;
    }
    while let Some(r) = reads.next().await {
        let (offset, bytes) = r?;
        let zeros = bytes.iter().all(|b| *b == 0);
        if !zeros {
            out.data_bytes += bytes.len() as u64;
        }
        match &mut sink {
            Sink::File(_) if zeros => {}
            Sink::File(f) => f.write_all_at(&bytes, offset).map_err(|e| io_error("writing the destination", &e))?,
            Sink::Stream(w) => w.write_all(&bytes).map_err(|e| io_error("writing the output stream", &e))?,
        }
        progress(offset + bytes.len() as u64, size);
    }
    progress(size, size);
    if let Sink::Stream(w) = &mut sink {
        w.flush().map_err(|e| io_error("flushing the output stream", &e))?;
    }
    Ok(out)
}

/// Reads exactly `buf.len()` bytes unless the source ends first; returns how many it read.
fn read_full(src: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Copies `size_bytes` from `src` into `image` (opened writable, at least that large), skipping
/// all-zero chunks (the image is thin: they read as zeros already). A source shorter than
/// `size_bytes` is an error naming how much it held.
pub async fn import(
    image: &Image,
    src: &mut dyn Read,
    size_bytes: u64,
    progress: Progress<'_>,
) -> Result<Transferred, RbdError> {
    let mut out = Transferred { size_bytes, data_bytes: 0 };
    let mut writes = futures::stream::FuturesUnordered::new();
    let mut offset = 0u64;
    let mut done = 0u64;
    while offset < size_bytes {
        let len = CHUNK_BYTES.min(size_bytes - offset) as usize;
        let mut buf = vec![0u8; len];
        let got = read_full(src, &mut buf).map_err(|e| io_error("reading the source", &e))?;
        if got < len {
            return Err(RbdError::Invalid(format!(
                "the source ended after {} bytes, short of the {size_bytes} bytes to import",
                offset + got as u64
            )));
        }
        if buf.iter().any(|b| *b != 0) {
            out.data_bytes += len as u64;
            let at = offset;
            writes.push(async move { image.write(at, bytes::Bytes::from(buf)).await.map(|()| len as u64) });
        } else {
            done += len as u64;
            progress(done, size_bytes);
        }
        offset += len as u64;
        // Bounded: at most CHUNKS_IN_FLIGHT chunks are held.
        while writes.len() >= CHUNKS_IN_FLIGHT {
            if let Some(r) = writes.next().await {
                done += r?;
                progress(done, size_bytes);
            }
        }
    }
    while let Some(r) = writes.next().await {
        done += r?;
        progress(done, size_bytes);
    }
    Ok(out)
}
