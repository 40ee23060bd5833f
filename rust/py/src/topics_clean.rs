//! Topic deletion's calls of `Store` (`DefaultMessageStore.deleteTopics`, `cleanUnusedTopic`,
//! `cleanExpiredConsumerQueue`): each runs with the GIL released, and alone in the store (see
//! `rmqstore_core`'s `store::topics_clean`).

use std::collections::HashSet;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::args;
use crate::store::Store;

/// The topic names of an iterable of `str` (a lone `str` or bytes is refused: iterating it
/// would name one topic per character).
fn topic_names(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<String>> {
    let wanted = "an iterable of topic names (str)";
    if obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
    {
        return Err(args::type_error(name, wanted, obj));
    }
    let iter = obj
        .try_iter()
        .map_err(|_| args::type_error(name, wanted, obj))?;
    let mut out = Vec::new();
    for item in iter {
        let item = item?;
        let topic = args::text(&item, &format!("every topic of {name}"))?;
        out.push(topic.to_string());
    }
    Ok(out)
}

#[pymethods]
impl Store {
    /// `deleteTopics`: how many of the topics had consume queues removed.
    fn delete_topics(&self, py: Python<'_>, topics: &Bound<'_, PyAny>) -> PyResult<usize> {
        let topics = topic_names(topics, "topics")?;
        self.run(py, |s| s.delete_topics(&topics))
    }

    /// `cleanUnusedTopic`: the topics deleted, sorted.
    fn clean_unused_topics(
        &self,
        py: Python<'_>,
        keep: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<String>> {
        let keep: HashSet<String> = topic_names(keep, "keep")?.into_iter().collect();
        self.run(py, |s| s.clean_unused_topics(&keep))
    }

    /// `cleanExpiredConsumerQueue`: the queues destroyed, as (topic, queue id), sorted.
    fn clean_expired_consumer_queues(&self, py: Python<'_>) -> PyResult<Vec<(String, i32)>> {
        self.run(py, |s| s.clean_expired_consumer_queues())
    }
}
