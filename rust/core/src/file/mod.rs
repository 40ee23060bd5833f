pub mod allocate;
pub mod checkpoint;
pub mod lockfile;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod transient_pool;
