//! Documents over HTTP: upload (an ingest job), list, show, delete, and page images with the
//! evidence boxes drawn.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::jobs::Accepted;
use super::{ApiError, AppState};
use crate::error::ErrorKind;
use crate::retrieval::has_current_vectors;
use crate::store::DocumentRecord;

/// A document as the API shows it.
#[derive(Serialize)]
pub struct DocumentView {
    pub id: String,
    pub title: String,
    pub file_name: String,
    pub pages: u32,
    pub pages_without_text: u32,
    pub has_page_images: bool,
    /// Seconds since the Unix epoch.
    pub ingested_at: u64,
    /// Token vectors and BM25 are both current: the document answers questions fully.
    pub indexed: bool,
    /// The file had no end-of-file marker and PDFium rebuilt what was there.
    pub truncated: bool,
    /// Pages PDFium could not read, kept empty.
    pub lost_pages: Vec<u32>,
}

fn view(state: &AppState, d: &DocumentRecord) -> Result<DocumentView, ApiError> {
    let index = state.store.index_state(d)?;
    let damage = state.store.damage(d)?;
    Ok(DocumentView {
        truncated: damage.truncated,
        lost_pages: damage.lost_pages,
        id: d.id.clone(),
        title: d.title.clone(),
        file_name: d.source_path.rsplit('/').next().unwrap_or_default().to_string(),
        pages: d.page_count,
        pages_without_text: d.pages_without_text,
        has_page_images: d.has_page_images,
        ingested_at: d.ingested_at,
        indexed: index.lexical && has_current_vectors(&index),
    })
}

/// The stored document with this exact id.
pub fn document(state: &AppState, id: &str) -> Result<DocumentRecord, ApiError> {
    state.store.document(id)?.ok_or_else(|| ApiError::not_found(format!("there is no document {id}; GET /v1/documents lists them")))
}

/// `GET /v1/documents`
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let docs = state.store.documents()?;
    let views = docs.iter().map(|d| view(&state, d)).collect::<Result<Vec<_>, _>>()?;
    Ok(Json(json!({ "documents": views })))
}

/// `GET /v1/documents/{id}`
pub async fn show(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let doc = document(&state, &id)?;
    let outline = crate::ingest::document_outline(&state.store, &doc)?;
    let mut v = serde_json::to_value(view(&state, &doc)?).map_err(|e| ApiError::internal(e.to_string()))?;
    v["outline"] = serde_json::to_value(outline).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(v))
}

/// `POST /v1/documents`: one PDF as the multipart field `file`; answers 202 with the ingest
/// job, 200 when the same bytes are already stored, 422 when the file is not a readable PDF.
pub async fn upload(State(state): State<Arc<AppState>>, mut multipart: Multipart) -> Result<Response, ApiError> {
    let mut file: Option<(String, Vec<u8>)> = None;
    while let Some(field) = multipart.next_field().await? {
        if field.name() != Some("file") {
            continue;
        }
        if file.is_some() {
            return Err(ApiError::bad_request("send one PDF per request (the field `file` came twice)"));
        }
        let name = field.file_name().unwrap_or("upload.pdf").to_string();
        let bytes = field.bytes().await?;
        file = Some((name, bytes.to_vec()));
    }
    let Some((name, bytes)) = file else {
        return Err(ApiError::bad_request("no PDF in the upload: send it as the multipart field `file`"));
    };
    if bytes.is_empty() {
        return Err(ApiError::new(ErrorKind::Invalid, format!("{name} is empty")));
    }
    match state.jobs.submit(bytes, name).await {
        Ok(Accepted::Job(job)) => Ok((StatusCode::ACCEPTED, Json(json!({ "job": job }))).into_response()),
        Ok(Accepted::Present(doc)) => Ok((StatusCode::OK, Json(json!({ "already_present": true, "document": view(&state, &doc)? }))).into_response()),
        Err(e) => Err(e),
    }
}

/// `GET /v1/jobs/{id}`
pub async fn job(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let job = state.jobs.get(&id).ok_or_else(|| ApiError::not_found(format!("there is no ingest job {id}")))?;
    Ok(Json(json!({ "job": job })))
}

/// `DELETE /v1/documents/{id}`
pub async fn remove(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let doc = document(&state, &id)?;
    let s = state.clone();
    let d = doc.clone();
    tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
        super::remove_document(&s.store, &s.services.lexical, &s.config.data_dir, &d).map_err(ApiError::internal)?;
        s.services.vectors.forget(&d.id);
        s.services.candidates.forget(&d.id);
        Ok(())
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(json!({ "deleted": doc.id })))
}

/// Query of the page image.
#[derive(Deserialize)]
pub struct ImageQuery {
    /// Boxes to draw, PDF points from the top-left: `x0,y0,x1,y1` separated by `;`.
    boxes: Option<String>,
    /// Words to highlight (filled, under the boxes), in the same form.
    words: Option<String>,
}

fn parse_boxes(text: &str) -> Result<Vec<[f32; 4]>, ApiError> {
    text.split(';')
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let v: Vec<f32> = b
                .split(',')
                .map(|x| x.trim().parse::<f32>())
                .collect::<Result<_, _>>()
                .map_err(|_| ApiError::bad_request(format!("box {b:?} is not x0,y0,x1,y1")))?;
            match v.as_slice() {
                [x0, y0, x1, y1] if v.iter().all(|x| x.is_finite()) => Ok([*x0, *y0, *x1, *y1]),
                _ => Err(ApiError::bad_request(format!("box {b:?} is not x0,y0,x1,y1"))),
            }
        })
        .take(64)
        .collect()
}

/// `GET /v1/documents/{id}/pages/{n}/image[?boxes=x0,y0,x1,y1;...]`: the page's PNG.
pub async fn page_image(State(state): State<Arc<AppState>>, Path((id, n)): Path<(String, u32)>, Query(q): Query<ImageQuery>) -> Result<Response, ApiError> {
    let doc = document(&state, &id)?;
    if n == 0 || n > doc.page_count {
        return Err(ApiError::not_found(format!("document {id} has no page {n} (it has {})", doc.page_count)));
    }
    let png = state
        .store
        .page_image(&doc, n)?
        .ok_or_else(|| ApiError::not_found(format!("no image is stored for page {n} of {id}: it was ingested without page images")))?;
    let boxes = parse_boxes(q.boxes.as_deref().unwrap_or(""))?;
    let words = parse_boxes(q.words.as_deref().unwrap_or(""))?;
    let png = if boxes.is_empty() && words.is_empty() {
        png
    } else {
        let page = state.store.page(&doc, n)?;
        tokio::task::spawn_blocking(move || draw_boxes(&png, page.width, &boxes, &words)).await.map_err(|e| ApiError::internal(e.to_string()))??
    };
    Ok(([(header::CONTENT_TYPE, "image/png"), (header::CACHE_CONTROL, "private, max-age=3600")], png).into_response())
}

/// Highlights `words` (a translucent yellow fill) and draws `boxes` as red outlines (PDF
/// points) on a page image whose width spans `page_width` points.
fn draw_boxes(png: &[u8], page_width: f32, boxes: &[[f32; 4]], words: &[[f32; 4]]) -> Result<Vec<u8>, ApiError> {
    let mut img = image::load_from_memory_with_format(png, image::ImageFormat::Png)
        .map_err(|e| ApiError::internal(format!("the stored page image is damaged: {e}")))?
        .to_rgba8();
    let (w, h) = img.dimensions();
    let scale = w as f32 / page_width.max(1.0);
    for b in words {
        let px = |v: f32, max: u32| ((v * scale).round().max(0.0) as u32).min(max.saturating_sub(1));
        let (x0, y0, x1, y1) = (px(b[0].min(b[2]), w), px(b[1].min(b[3]), h), px(b[0].max(b[2]), w), px(b[1].max(b[3]), h));
        for y in y0..=y1 {
            for x in x0..=x1 {
                let p = img.get_pixel_mut(x, y);
                // Multiplying by yellow keeps the ink legible under the highlight.
                p.0 = [p.0[0], p.0[1], (u16::from(p.0[2]) * 90 / 255) as u8, 255];
            }
        }
    }
    let thickness = (w / 300).max(2);
    let colour = image::Rgba([220, 30, 30, 255]);
    for b in boxes {
        let px = |v: f32, max: u32| ((v * scale).round().max(0.0) as u32).min(max.saturating_sub(1));
        let (x0, y0, x1, y1) = (px(b[0].min(b[2]), w), px(b[1].min(b[3]), h), px(b[0].max(b[2]), w), px(b[1].max(b[3]), h));
        for t in 0..thickness {
            for x in x0..=x1 {
                for y in [y0.saturating_sub(t), (y1 + t).min(h - 1)] {
                    img.put_pixel(x, y, colour);
                }
            }
            for y in y0..=y1 {
                for x in [x0.saturating_sub(t), (x1 + t).min(w - 1)] {
                    img.put_pixel(x, y, colour);
                }
            }
        }
    }
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).map_err(|e| ApiError::internal(format!("the page image could not be encoded: {e}")))?;
    Ok(out.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_parse_and_refuse_junk() {
        assert_eq!(parse_boxes("1,2,3,4;5,6,7,8").expect("parses"), vec![[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]);
        assert!(parse_boxes("").expect("empty").is_empty());
        assert!(parse_boxes("1,2,3").is_err());
        assert!(parse_boxes("1,2,3,NaN").is_err());
        assert!(parse_boxes("a,b,c,d").is_err());
    }

    #[test]
    fn a_drawn_box_changes_pixels_on_its_edge_only() {
        let img = image::RgbaImage::from_pixel(200, 100, image::Rgba([255, 255, 255, 255]));
        let mut png = std::io::Cursor::new(Vec::new());
        img.write_to(&mut png, image::ImageFormat::Png).expect("encodes");
        // The page is 100 points wide, so 2 pixels a point.
        let out = draw_boxes(png.get_ref(), 100.0, &[[10.0, 10.0, 50.0, 30.0]], &[[12.0, 12.0, 20.0, 16.0]]).expect("draws");
        let out = image::load_from_memory(&out).expect("decodes").to_rgba8();
        assert_eq!(out.get_pixel(20, 40).0, [220, 30, 30, 255], "top-left corner region");
        assert_eq!(out.get_pixel(100, 20).0, [220, 30, 30, 255], "top edge");
        assert_eq!(out.get_pixel(60, 40).0, [255, 255, 255, 255], "inside, away from the words, stays clear");
        assert_eq!(out.get_pixel(30, 28).0, [255, 255, 90, 255], "a highlighted word turns yellow");
        assert_eq!(out.get_pixel(150, 80).0, [255, 255, 255, 255], "outside stays clear");
    }
}
