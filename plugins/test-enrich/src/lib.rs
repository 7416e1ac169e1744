//! For the tests only: an enrich stage of contract 0.2.0. With `behaviour = "cards"` (the
//! default) it makes, per page, a `page-card` (the page's first `words` words), a `heading`
//! per heading block (anchored on the block) and a `region` per figure, image or table region
//! (its caption, or its kind), and for the document a `doc-card` (title and headings) linking
//! to every heading. `spin` busy-waits that many rounds per page, so a test
//! can kill an ingest half-way. The other behaviours misbehave: `loop` never returns, `memory`
//! allocates without end, `trap` panics, `huge` returns far too much, `bad-anchor` anchors an
//! artifact on a page that does not exist, `bad-link` links to a key nobody made,
//! `duplicate-key` makes the same key twice.

stage_kit::v2_world!("enrich-stage");

use stage_kit::v2::types::{Anchor, Param};
use stage_kit::v2::{page_artifact, param};

struct Cards;

fn spin(rounds: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..rounds {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

impl Guest for Cards {
    fn enrich_page(ctx: EnrichContext, page: PageContent) -> Result<Vec<Artifact>, String> {
        let behaviour: String = param(&ctx.params, "behaviour", "cards".to_string())?;
        let words: usize = param(&ctx.params, "words", 12)?;
        spin(param(&ctx.params, "spin", 0u64)?);
        let n = page.page.page;
        match behaviour.as_str() {
            "loop" => loop {
                spin(1_000_000);
            },
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => panic!("test-enrich was told to panic on page {n}"),
            "huge" => return Ok((0..200_000).map(|i| page_artifact(format!("p{n}-{i}"), "noise", n, vec![], "x".repeat(64))).collect()),
            "bad-anchor" => return Ok(vec![page_artifact(format!("p{n}"), "page-card", 99_999, vec![], "nowhere".into())]),
            "duplicate-key" => return Ok(vec![page_artifact("same".into(), "page-card", n, vec![], "one".into()); 2]),
            _ => {}
        }
        let mut out = vec![page_artifact(format!("p{n}"), "page-card", n, vec![], page.text.split_whitespace().take(words).collect::<Vec<_>>().join(" "))];
        for (i, block) in page.blocks.iter().enumerate() {
            if block.kind == "heading" && !block.text.trim().is_empty() {
                let mut a = page_artifact(format!("p{n}-b{i}"), "heading", n, vec![i as u32], block.text.split_whitespace().collect::<Vec<_>>().join(" "));
                a.anchor.bbox = Some(block.bbox);
                a.fields.push(Param { key: "font-size".into(), value: block.font_size.to_string() });
                out.push(a);
            }
        }
        for (i, region) in stage_kit::v2::pages::regions(&page.page)?.into_iter().enumerate() {
            let text = if region.caption.is_empty() { region.kind.clone() } else { region.caption.clone() };
            let mut a = page_artifact(format!("p{n}-r{i}"), "region", n, region.blocks, text);
            a.anchor.bbox = Some(region.bbox);
            a.fields.push(Param { key: "region-kind".into(), value: region.kind });
            out.push(a);
        }
        if behaviour == "bad-link" {
            out[0].links.push("nobody-made-this".into());
        }
        Ok(out)
    }

    fn enrich_document(ctx: EnrichContext, made: Vec<Artifact>) -> Result<Vec<Artifact>, String> {
        let headings: Vec<&Artifact> = made.iter().filter(|a| a.kind == "heading").collect();
        let text = std::iter::once(ctx.document.title.clone()).chain(headings.iter().map(|a| a.text.clone())).collect::<Vec<_>>().join("; ");
        Ok(vec![Artifact {
            key: "doc".into(),
            kind: "doc-card".into(),
            anchor: Anchor { page: None, bbox: None, blocks: vec![] },
            text,
            fields: vec![Param { key: "pages".into(), value: ctx.document.page_count.to_string() }],
            links: headings.iter().map(|a| a.key.clone()).collect(),
        }])
    }
}

export!(Cards);
