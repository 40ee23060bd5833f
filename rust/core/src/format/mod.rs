pub mod compression;
pub mod message;
