//! Multi-row statements: many tasks per round trip, with the rows passed as a
//! `VALUES` list of bound parameters.
//!
//! Statements are written once as templates, with `{values}` where the rows
//! go and `{now}` for the batch clock, e.g.
//! `WITH v(v_id) AS (VALUES {values}) UPDATE tasks SET updated_at_ms = {now}
//! FROM v WHERE id = v_id RETURNING id`. The `WITH` form serves both SQLite
//! (which cannot name the columns of `(VALUES ..) AS v(..)`) and PostgreSQL.
//!
//! Rows go in chunks of at most [`MAX_ROWS`], which keeps SQLite under its
//! 32,766-parameter limit. A chunk is padded with all-NULL rows up to a power
//! of four, so a statement comes in a handful of shapes that sqlx's
//! per-connection statement cache keeps prepared, instead of one shape per
//! batch size. Padding rows match nothing: `id = NULL` is never true, and
//! inserts filter them out.

use super::Backend;
use sqlx::any::AnyRow;
use sqlx::AnyConnection;
use std::borrow::Cow;

/// The most rows one statement carries.
pub(super) const MAX_ROWS: usize = 1024;

/// SQLite's default limit on the parameters of one statement.
const SQLITE_MAX_PARAMS: usize = 32_766;

/// The SQL type of a column of a `VALUES` list, for typing padding NULLs
/// (PostgreSQL needs every row of a column to agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Col {
    Int,
    /// Never NULL: sqlx's `Any` driver binds a NULL `f64` to PostgreSQL as
    /// a `real` (4 bytes), and a statement prepared with one then refuses
    /// every 8-byte value bound there later. Padding rows bind 0; a column
    /// that may be missing carries a NULL-able flag beside it.
    Real,
    Text,
    Blob,
}

/// One bound value.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Param<'a> {
    Int(Option<i64>),
    Real(f64),
    Text(Option<Cow<'a, str>>),
    Blob(Option<Cow<'a, [u8]>>),
}

impl<'a> Param<'a> {
    pub fn int(v: impl Into<i64>) -> Self {
        Param::Int(Some(v.into()))
    }

    pub fn text(s: &'a str) -> Self {
        Param::Text(Some(clean_text(s)))
    }

    pub fn opt_text(s: Option<&'a str>) -> Self {
        Param::Text(s.map(clean_text))
    }

    pub fn owned_text(s: String) -> Self {
        Param::Text(Some(clean_owned(s)))
    }
}

/// PostgreSQL refuses NUL in `TEXT`; an error message a trainer printed may
/// hold one, and one bad write must not fail every batch after it. Replaced
/// on both backends, so both store the same text.
fn clean_text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

fn clean_owned(s: String) -> Cow<'static, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Owned(s)
    }
}

/// The padded size of a chunk of `rows` rows: the next power of four, at
/// most [`MAX_ROWS`].
pub(super) fn padded(rows: usize) -> usize {
    let mut size = 1;
    while size < rows && size < MAX_ROWS {
        size *= 4;
    }
    size
}

/// How a backend spells placeholders.
///
/// PostgreSQL numbers them (`$1`, `$2`, ..). SQLite gets anonymous `?`s,
/// bound in order of appearance: SQLite keeps the names of `$N` and `?N`
/// parameters in a list it searches linearly, and sqlx asks for every
/// parameter's name at every execution, which makes a statement with
/// thousands of numbered parameters quadratic in their count. Anonymous
/// parameters have no name, and `{now}` is then bound once per appearance.
fn placeholder(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Postgres => format!("${n}"),
        Backend::Sqlite => "?".to_string(),
    }
}

/// The template with `rows` rows of `cols` placeholders in `{values}` (row
/// by row) and the next placeholder in each `{now}`; `{values}` precedes
/// every `{now}` in every template, so parameters appear in binding order.
pub(super) fn render(backend: Backend, template: &str, cols: usize, rows: usize) -> String {
    debug_assert!(cols * MAX_ROWS < SQLITE_MAX_PARAMS);
    debug_assert!(template
        .find("{now}")
        .is_none_or(|now| template.find("{values}").is_some_and(|v| v < now)));
    let mut values = String::with_capacity(rows * cols * 7);
    for row in 0..rows {
        if row > 0 {
            values.push(',');
        }
        values.push('(');
        for col in 0..cols {
            if col > 0 {
                values.push(',');
            }
            values.push_str(&placeholder(backend, row * cols + col + 1));
        }
        values.push(')');
    }
    template
        .replace("{values}", &values)
        .replace("{now}", &placeholder(backend, rows * cols + 1))
}

/// Runs `template` over `rows` (each `cols.len()` long), chunk by chunk, and
/// returns every row the statements returned, in order.
pub(super) async fn run(
    conn: &mut AnyConnection,
    backend: Backend,
    template: &str,
    cols: &[Col],
    rows: &[Vec<Param<'_>>],
    now_ms: Option<i64>,
) -> Result<Vec<AnyRow>, sqlx::Error> {
    let mut out = Vec::new();
    for chunk in rows.chunks(MAX_ROWS) {
        let sql = render(backend, template, cols.len(), padded(chunk.len()));
        let query = bind_chunk(sqlx::query(&sql), backend, template, cols, chunk, now_ms);
        out.extend(query.fetch_all(&mut *conn).await?);
    }
    Ok(out)
}

/// Binds a chunk of at most [`MAX_ROWS`] rows to the statement [`render`]
/// made of `template` for it: the rows, the padding rows, then the clock.
pub(super) fn bind_chunk<'q>(
    mut query: AnyQuery<'q>,
    backend: Backend,
    template: &str,
    cols: &[Col],
    chunk: &'q [Vec<Param<'_>>],
    now_ms: Option<i64>,
) -> AnyQuery<'q> {
    for row in chunk {
        debug_assert_eq!(row.len(), cols.len());
        for param in row {
            query = bind(query, param);
        }
    }
    for _ in chunk.len()..padded(chunk.len()) {
        for col in cols {
            query = bind_null(query, *col);
        }
    }
    let now_binds = match backend {
        Backend::Postgres => 1,
        Backend::Sqlite => template.matches("{now}").count(),
    };
    if let Some(now) = now_ms {
        for _ in 0..now_binds {
            query = query.bind(now);
        }
    }
    query
}

pub(super) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Binds one value to a query.
pub(super) fn bind<'q>(query: AnyQuery<'q>, param: &'q Param<'_>) -> AnyQuery<'q> {
    match param {
        Param::Int(v) => query.bind(*v),
        Param::Real(v) => query.bind(*v),
        Param::Text(v) => query.bind(v.as_deref()),
        Param::Blob(v) => query.bind(v.as_deref()),
    }
}

fn bind_null(query: AnyQuery<'_>, col: Col) -> AnyQuery<'_> {
    match col {
        Col::Int => query.bind(None::<i64>),
        Col::Real => query.bind(0.0f64),
        Col::Text => query.bind(None::<String>),
        Col::Blob => query.bind(None::<Vec<u8>>),
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn chunks_pad_to_few_shapes() {
        assert_eq!(padded(1), 1);
        assert_eq!(padded(2), 4);
        assert_eq!(padded(4), 4);
        assert_eq!(padded(5), 16);
        assert_eq!(padded(300), 1024);
        assert_eq!(padded(MAX_ROWS), MAX_ROWS);
    }

    #[test]
    fn placeholders_number_rows_then_the_clock() {
        let template = "VALUES {values} SET t = {now}, u = {now}";
        assert_eq!(
            render(Backend::Postgres, template, 2, 2),
            "VALUES ($1,$2),($3,$4) SET t = $5, u = $5"
        );
        assert_eq!(
            render(Backend::Sqlite, template, 2, 2),
            "VALUES (?,?),(?,?) SET t = ?, u = ?"
        );
    }

    #[test]
    fn nul_characters_are_replaced_not_stored() {
        assert_eq!(
            Param::text("a\0b"),
            Param::Text(Some(Cow::Owned("a\u{FFFD}b".into())))
        );
        assert_eq!(Param::text("ab"), Param::Text(Some(Cow::Borrowed("ab"))));
    }
}
