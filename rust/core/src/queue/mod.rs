pub mod consume_queue;
pub mod store;
