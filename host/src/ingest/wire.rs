//! What the host and its PDF worker process say to each other: length-prefixed postcard frames
//! over the worker's stdin and stdout.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::pdf::{PageRead, PdfError};
use crate::store::{BoundingBox, OutlineEntry};

/// From the host: open one document, then read its pages one by one.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Open {
        bytes: Vec<u8>,
        password: Option<String>,
    },
    Page {
        number: u32,
        image_max_px: Option<u32>,
    },
    /// A region of a page rendered at `dpi`, its longer side at most `max_px`.
    Crop {
        number: u32,
        bbox: BoundingBox,
        dpi: u32,
        max_px: u32,
    },
}

/// From the worker: one answer per request.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Opened {
        page_count: u32,
        title: Option<String>,
        outline: Vec<OutlineEntry>,
        truncated: bool,
    },
    Page(PageRead),
    /// A PNG.
    Image(Vec<u8>),
    Failed(PdfError),
}

/// Largest frame read; a document's bytes are bounded by the upload limit long before this.
const MAX_FRAME: u64 = 4 << 30;

/// Writes one message and flushes it.
pub fn write_frame<T: Serialize>(w: &mut impl Write, message: &T) -> io::Result<()> {
    let bytes = postcard::to_stdvec(message).map_err(io::Error::other)?;
    w.write_all(&(bytes.len() as u64).to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// Reads one message; None at a clean end of the stream.
pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 8];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes is too large")));
    }
    let mut buf = vec![0; len as usize];
    r.read_exact(&mut buf)?;
    postcard::from_bytes(&buf).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_a_short_stream_is_an_error() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &Request::Page { number: 7, image_max_px: Some(300) }).expect("write");
        write_frame(&mut buf, &Reply::Failed(PdfError::NotPdf)).expect("write");
        let mut r = buf.as_slice();
        assert!(matches!(read_frame::<Request>(&mut r).expect("read"), Some(Request::Page { number: 7, image_max_px: Some(300) })));
        assert!(matches!(read_frame::<Reply>(&mut r).expect("read"), Some(Reply::Failed(PdfError::NotPdf))));
        assert!(read_frame::<Reply>(&mut r).expect("clean end").is_none());
        let mut cut = &buf[..buf.len() - 1];
        read_frame::<Request>(&mut cut).expect("first frame whole");
        assert!(read_frame::<Reply>(&mut cut).is_err(), "a frame cut short is not a clean end");
    }
}
