//! Which columns a bulk read builds ([`ColumnMask`]), and how a caller asks for one
//! ([`ReadRequest`]). A column left out is never built: no vector is taken for it, no value is
//! decoded for it, and when none of `tags`, `keys` and `properties` is asked for, a record's
//! properties are not parsed at all. The checks of a read do not depend on the mask: each
//! record is still matched to its consume queue unit and its body CRC is still verified
//! (`check_crc_on_read`), whether or not the body is returned.

use super::BodyLayout;

/// A column of a bulk read, in the order of the full batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Column {
    Topic,
    QueueId,
    QueueOffset,
    CommitLogOffset,
    StoreTimestamp,
    BornTimestamp,
    Tags,
    Keys,
    Properties,
    Body,
}

impl Column {
    /// Every column, in the order of the full batch.
    pub const ALL: [Column; 10] = [
        Column::Topic,
        Column::QueueId,
        Column::QueueOffset,
        Column::CommitLogOffset,
        Column::StoreTimestamp,
        Column::BornTimestamp,
        Column::Tags,
        Column::Keys,
        Column::Properties,
        Column::Body,
    ];

    /// The column's name in a batch (and in the Spark source's schema).
    pub const fn name(self) -> &'static str {
        match self {
            Column::Topic => "topic",
            Column::QueueId => "queue_id",
            Column::QueueOffset => "queue_offset",
            Column::CommitLogOffset => "commit_log_offset",
            Column::StoreTimestamp => "store_timestamp",
            Column::BornTimestamp => "born_timestamp",
            Column::Tags => "tags",
            Column::Keys => "keys",
            Column::Properties => "properties",
            Column::Body => "body",
        }
    }

    /// The column of that name, if any (names are exact: lower case, with underscores).
    pub fn from_name(name: &str) -> Option<Column> {
        Column::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The names of the column's vectors in [`BatchColumns::into_named`](super::BatchColumns::into_named).
    pub const fn vectors(self) -> &'static [&'static str] {
        match self {
            Column::Topic => &["topic_offsets", "topic_data"],
            Column::QueueId => &["queue_id"],
            Column::QueueOffset => &["queue_offset"],
            Column::CommitLogOffset => &["commit_log_offset"],
            Column::StoreTimestamp => &["store_timestamp"],
            Column::BornTimestamp => &["born_timestamp"],
            Column::Tags => &["tags_valid", "tags_offsets", "tags_data"],
            Column::Keys => &["keys_list_offsets", "keys_offsets", "keys_data"],
            Column::Properties => &[
                "props_map_offsets",
                "props_key_offsets",
                "props_key_data",
                "props_value_offsets",
                "props_value_data",
            ],
            Column::Body => &["body_offsets", "body_data", "body_views"],
        }
    }

    /// The column a vector of [`BatchColumns::into_named`](super::BatchColumns::into_named)
    /// belongs to.
    pub fn of_vector(vector: &str) -> Option<Column> {
        Column::ALL
            .into_iter()
            .find(|c| c.vectors().contains(&vector))
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl std::fmt::Display for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`Column`]s: what a bulk read builds. The vectors of the columns outside it are
/// empty in the returned [`BatchColumns`](super::BatchColumns) (not even the leading 0 of an
/// offsets vector); `rows` and `next_offset` are set whatever the mask, so an empty mask
/// counts the messages of a range (still checking each record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ColumnMask(u16);

impl Default for ColumnMask {
    /// Every column.
    fn default() -> Self {
        ColumnMask::ALL
    }
}

impl ColumnMask {
    /// Every column.
    pub const ALL: ColumnMask = ColumnMask((1 << Column::ALL.len()) - 1);
    /// No column (a count of the rows).
    pub const NONE: ColumnMask = ColumnMask(0);

    /// This set with `column` too.
    #[must_use]
    pub const fn with(self, column: Column) -> ColumnMask {
        ColumnMask(self.0 | column.bit())
    }

    /// This set without `column`.
    #[must_use]
    pub const fn without(self, column: Column) -> ColumnMask {
        ColumnMask(self.0 & !column.bit())
    }

    pub const fn contains(self, column: Column) -> bool {
        self.0 & column.bit() != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The columns of the set, in the order of the full batch.
    pub fn columns(self) -> impl Iterator<Item = Column> {
        Column::ALL.into_iter().filter(move |c| self.contains(*c))
    }

    /// The set of the named columns. Unknown names and names given twice are an error that
    /// lists them all (`Err` holds the message).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<ColumnMask, String> {
        let mut mask = ColumnMask::NONE;
        let (mut unknown, mut twice) = (Vec::new(), Vec::new());
        for name in names {
            let name = name.as_ref();
            match Column::from_name(name) {
                None => unknown.push(format!("{name:?}")),
                Some(c) if mask.contains(c) => {
                    if !twice.contains(&c.name()) {
                        twice.push(c.name());
                    }
                }
                Some(c) => mask = mask.with(c),
            }
        }
        let mut problems = Vec::new();
        if !unknown.is_empty() {
            let known: Vec<&str> = Column::ALL.iter().map(|c| c.name()).collect();
            problems.push(format!(
                "unknown columns {} (the columns are {})",
                unknown.join(", "),
                known.join(", ")
            ));
        }
        if !twice.is_empty() {
            problems.push(format!(
                "columns given more than once: {}",
                twice.join(", ")
            ));
        }
        if problems.is_empty() {
            Ok(mask)
        } else {
            Err(problems.join("; "))
        }
    }

    /// Whether a record's properties must be parsed (`tags`, `keys` or `properties` asked).
    pub(crate) const fn needs_properties(self) -> bool {
        self.contains(Column::Tags)
            || self.contains(Column::Keys)
            || self.contains(Column::Properties)
    }
}

impl FromIterator<Column> for ColumnMask {
    fn from_iter<I: IntoIterator<Item = Column>>(iter: I) -> Self {
        iter.into_iter().fold(ColumnMask::NONE, ColumnMask::with)
    }
}

/// What [`MessageStore::read_columns`](crate::MessageStore::read_columns) builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// The columns built (every one by default).
    pub columns: ColumnMask,
    /// Give compressed bodies back decompressed; `None`: the store's `decompress_body_on_read`.
    /// Without the body column nothing is decompressed.
    pub decompress: Option<bool>,
    /// How the bodies are given (`binary_view` rows into the mapped segments by default).
    pub body: BodyLayout,
}

impl Default for ReadRequest {
    fn default() -> Self {
        ReadRequest {
            columns: ColumnMask::ALL,
            decompress: None,
            body: BodyLayout::View,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_all_listed() {
        for c in Column::ALL {
            assert_eq!(Column::from_name(c.name()), Some(c));
        }
        let all: Vec<&str> = Column::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(ColumnMask::from_names(&all), Ok(ColumnMask::ALL));
        assert_eq!(ColumnMask::from_names::<&str>(&[]), Ok(ColumnMask::NONE));
        let m = ColumnMask::from_names(&["body", "queue_offset"]).unwrap();
        assert_eq!(
            m.columns().collect::<Vec<_>>(),
            [Column::QueueOffset, Column::Body]
        );
        assert!(!m.needs_properties());
        assert!(ColumnMask::NONE.with(Column::Keys).needs_properties());
        let e =
            ColumnMask::from_names(&["body", "Body", "nope", "body", "tags", "tags"]).unwrap_err();
        assert!(e.contains("\"Body\", \"nope\""), "{e}");
        assert!(e.contains("more than once: body, tags"), "{e}");
        assert_eq!(
            ColumnMask::ALL.without(Column::Body).with(Column::Body),
            ColumnMask::ALL
        );
        assert_eq!(
            Column::ALL.into_iter().collect::<ColumnMask>(),
            ColumnMask::ALL
        );
    }
}
