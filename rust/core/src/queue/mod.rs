pub(crate) mod consume_queue;
pub(crate) mod store;
pub(crate) mod tombstones;
