//! The file layer: fixed-size segment files mapped into memory and the sequences they form,
//! below any record format.
//! - `mapped_file`: one segment (append, commit, flush, truncate, warm);
//! - `mapped_file_queue`: a folder of segments named by their first offset;
//! - `allocate`: creating segments ahead of need (`AllocateMappedFileService`);
//! - `segment_view`: read-only mappings of segments whose bytes bulk reads hand out;
//! - `transient_pool`: the write buffers of `transientStorePoolEnable`;
//! - `lockfile`: the store's lock file;
//! - `checkpoint`: the checkpoint and abort files.

pub(crate) mod allocate;
pub(crate) mod checkpoint;
pub(crate) mod lockfile;
pub(crate) mod mapped_file;
pub(crate) mod mapped_file_queue;
pub mod segment_view;
pub(crate) mod transient_pool;
