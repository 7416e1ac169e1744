//! A page's text with the cells of a table row on one line. Ingest splits a line at a wide gap,
//! so each cell of a table is a block of its own, and the page's text (blocks separated by blank
//! lines) reads a row as a column of loose figures: "Corporate loans", "$24,837", "$20,740". Set
//! on one line, "Corporate loans | $24,837 | $20,740", a model can tell which figure belongs to
//! which label and year.

/// The most lines a block may have and still be read as a table cell; a paragraph beside a
/// paragraph (two text columns) stays apart.
const MAX_CELL_LINES: usize = 3;

/// A block's box (x0, y0, x1, y1, origin at the page's top left) and its text.
pub type BlockText<'a> = ((f32, f32, f32, f32), &'a str);

/// Whether `next` continues the row that starts at `first` and last took `last`: both short,
/// `next` to the right of `last` and sharing most of the height of the row's first cell.
fn continues_row(first: &BlockText, last: &BlockText, next: &BlockText) -> bool {
    let short = |b: &BlockText| b.1.lines().count() <= MAX_CELL_LINES;
    let ((fx0, fy0, fx1, fy1), _) = *first;
    let ((_, _, lx1, _), _) = *last;
    let ((nx0, ny0, nx1, ny1), _) = *next;
    let overlap = fy1.min(ny1) - fy0.max(ny0);
    let lower = (fy1 - fy0).min(ny1 - ny0).max(0.0);
    short(first) && short(last) && short(next) && nx0 >= lx1 - 1.0 && nx0 > fx0 && nx1 > fx1 && overlap > 0.5 * lower
}

/// The page's text in reading order, blocks separated by blank lines and their lines by
/// newlines (as the page's own text), except that blocks side by side on one row are one line,
/// their cells separated by " | ", and consecutive rows of cells form one block, so that a
/// table's first row (its column headings) heads its block.
pub fn row_text<'a>(blocks: impl IntoIterator<Item = BlockText<'a>>) -> String {
    let mut rows: Vec<Vec<BlockText>> = Vec::new();
    for block in blocks {
        match rows.last_mut() {
            Some(row) if continues_row(&row[0], &row[row.len() - 1], &block) => row.push(block),
            _ => rows.push(vec![block]),
        }
    }
    let mut out = String::new();
    let mut in_table = false;
    for row in rows {
        let cells = row.len() > 1;
        if !out.is_empty() {
            out.push_str(if cells && in_table { "\n" } else { "\n\n" });
        }
        if cells {
            let joined: Vec<String> = row.iter().map(|(_, text)| text.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
            out.push_str(&joined.join(" | "));
        } else {
            out.push_str(row[0].1.trim());
        }
        in_table = cells;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(x0: f32, y0: f32, x1: f32, y1: f32, text: &str) -> BlockText<'_> {
        ((x0, y0, x1, y1), text)
    }

    #[test]
    fn cells_of_a_row_share_a_line_and_rows_share_a_block() {
        let blocks = [
            b(50.0, 40.0, 400.0, 60.0, "The table below presents details about loans receivable."),
            b(50.0, 80.0, 120.0, 90.0, "$ in millions"),
            b(300.0, 80.0, 330.0, 90.0, "2016"),
            b(360.0, 80.0, 390.0, 90.0, "2015"),
            b(50.0, 95.0, 180.0, 105.0, "Corporate loans"),
            b(300.0, 95.0, 335.0, 105.0, "$24,837"),
            b(360.0, 95.0, 395.0, 105.0, "$20,740"),
            b(50.0, 110.0, 200.0, 130.0, "Loans backed by commercial\nreal estate"),
            b(300.0, 115.0, 330.0, 125.0, "4,761"),
            b(360.0, 115.0, 390.0, 125.0, "5,271"),
            b(50.0, 200.0, 200.0, 210.0, "Goldman Sachs 2016 Form 10-K"),
        ];
        assert_eq!(
            row_text(blocks),
            "The table below presents details about loans receivable.\n\n\
             $ in millions | 2016 | 2015\n\
             Corporate loans | $24,837 | $20,740\n\
             Loans backed by commercial real estate | 4,761 | 5,271\n\n\
             Goldman Sachs 2016 Form 10-K"
        );
    }

    #[test]
    fn paragraphs_of_two_columns_and_stacked_blocks_stay_apart() {
        let left = "one\ntwo\nthree\nfour\nfive";
        let blocks = [b(50.0, 40.0, 250.0, 200.0, left), b(300.0, 40.0, 500.0, 60.0, "A heading on the right"), b(300.0, 70.0, 500.0, 80.0, "A line under it")];
        assert_eq!(row_text(blocks), format!("{left}\n\nA heading on the right\n\nA line under it"));
    }

    #[test]
    fn a_block_to_the_left_or_a_row_below_starts_a_new_row() {
        let blocks = [b(300.0, 40.0, 330.0, 50.0, "right"), b(50.0, 40.0, 100.0, 50.0, "left"), b(120.0, 60.0, 160.0, 70.0, "below")];
        assert_eq!(row_text(blocks), "right\n\nleft\n\nbelow");
    }

    #[test]
    fn no_blocks_no_text() {
        assert_eq!(row_text([]), "");
    }
}
