pub mod compression;
pub mod index;
pub mod message;
