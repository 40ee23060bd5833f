//! Stores opened read-only for the JVM: one `MessageStore` per folder and settings in the
//! process, shared by every handle on it (the tasks of one executor and the driver's planning),
//! closed when its last handle is.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rmqstore_core::config::{self, SettingKind, SettingValue};
use rmqstore_core::{MessageStore, StoreConfig, StoreError};

/// A store's folder (canonical) and its settings, sorted.
type Key = (PathBuf, Vec<(String, String)>);

struct Shared {
    store: Arc<MessageStore>,
    handles: usize,
}

#[derive(Default)]
struct Registry {
    stores: HashMap<Key, Shared>,
    handles: HashMap<i64, Key>,
    next_handle: i64,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    // Nothing a panic could leave half-changed matters here: take the map as it is.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The core value of setting `name` written as text (`store.<name>` options of the source).
fn setting_value(name: &str, text: &str) -> Result<SettingValue, StoreError> {
    let Some(setting) = config::setting(name) else {
        return Err(StoreError::config(
            name,
            format!("unknown setting{}", config::did_you_mean(name)),
        ));
    };
    let t = text.trim();
    Ok(match setting.kind {
        SettingKind::Int { .. } => SettingValue::Int(t.parse::<i64>().map_err(|_| {
            StoreError::config(
                name,
                format!("must be {}, got {text:?}", setting.kind.expected()),
            )
        })?),
        SettingKind::Bool => match t.to_ascii_lowercase().as_str() {
            "true" => SettingValue::Bool(true),
            "false" => SettingValue::Bool(false),
            _ => {
                return Err(StoreError::config(
                    name,
                    format!("must be 'true' or 'false', got {text:?}"),
                ))
            }
        },
        SettingKind::OptionalPath => SettingValue::Path(Some(PathBuf::from(text))),
        _ => SettingValue::Str(text.to_owned()),
    })
}

/// The configuration `settings` (setting names and their text) give, checked.
pub(crate) fn config_of(settings: &[(String, String)]) -> Result<StoreConfig, StoreError> {
    let mut config = StoreConfig::default();
    for (name, text) in settings {
        config.set(name, setting_value(name, text)?)?;
    }
    config.validate()?;
    Ok(config)
}

fn open_store(path: &Path, settings: &[(String, String)]) -> Result<MessageStore, StoreError> {
    MessageStore::open_read_only(path, config_of(settings)?)
}

/// A new handle on the store at `path` opened read-only with `settings`, opening it unless
/// this process has it open already.
pub fn open(path: &str, mut settings: Vec<(String, String)>) -> Result<i64, StoreError> {
    let folder = Path::new(path);
    let canonical = folder.canonicalize().map_err(|e| {
        StoreError::InvalidArgument(format!("{path} is not a message store folder: {e}"))
    })?;
    settings.sort();
    let key = (canonical, settings);
    let mut guard = registry();
    let reg = guard.get_or_insert_with(Registry::default);
    if !reg.stores.contains_key(&key) {
        // Opening reads the segments' metadata only: done under the lock, so that two tasks
        // never open the same store twice.
        let store = open_store(&key.0, &key.1)?;
        reg.stores.insert(
            key.clone(),
            Shared {
                store: Arc::new(store),
                handles: 0,
            },
        );
    }
    reg.stores.get_mut(&key).expect("inserted above").handles += 1;
    reg.next_handle += 1;
    let handle = reg.next_handle;
    reg.handles.insert(handle, key);
    Ok(handle)
}

/// The store of a handle.
pub fn store(handle: i64) -> Result<Arc<MessageStore>, StoreError> {
    let guard = registry();
    guard
        .as_ref()
        .and_then(|reg| {
            let key = reg.handles.get(&handle)?;
            Some(Arc::clone(&reg.stores.get(key)?.store))
        })
        .ok_or_else(|| {
            StoreError::InvalidArgument(format!("store handle {handle} is closed or unknown"))
        })
}

/// Closes a handle; the store closes with its last handle (batches read from it stay valid:
/// they hold their own references to the mapped segments). Closing a closed handle does
/// nothing.
pub fn close(handle: i64) -> Result<(), StoreError> {
    let last = {
        let mut guard = registry();
        let Some(reg) = guard.as_mut() else {
            return Ok(());
        };
        let Some(key) = reg.handles.remove(&handle) else {
            return Ok(());
        };
        let shared = reg
            .stores
            .get_mut(&key)
            .expect("a handle's store is registered");
        shared.handles -= 1;
        if shared.handles == 0 {
            reg.stores.remove(&key).map(|s| s.store)
        } else {
            None
        }
    };
    match last {
        // Other threads may still hold the Arc for a call in progress: the store closes when
        // the last of them drops it.
        Some(store) => match Arc::try_unwrap(store) {
            Ok(store) => store.close(),
            Err(_) => Ok(()),
        },
        None => Ok(()),
    }
}

/// Stores open and handles on them.
pub fn open_counts() -> [i64; 2] {
    let guard = registry();
    guard.as_ref().map_or([0, 0], |reg| {
        [reg.stores.len() as i64, reg.handles.len() as i64]
    })
}
