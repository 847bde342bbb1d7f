//! The key that signs show tokens.

use super::*;

/// The signing secret: the configured one, else the one kept in `data_dir/popups.secret`
/// (made on first start), so tokens stay valid across restarts.
pub(super) fn secret(cfg: &PopupsConfig, data_dir: &str) -> Result<Vec<u8>, PopupsError> {
    if !cfg.token_secret.is_empty() {
        return Ok(cfg.token_secret.as_bytes().to_vec());
    }
    let path = Path::new(data_dir).join("popups.secret");
    // The secret is 64 hex digits; a file far larger is not one hotpath made.
    match hotpath_config::file::read_bounded(&path, 4096) {
        Ok(s) if s.len() >= 16 => Ok(s),
        Ok(_) => Err(PopupsError::SecretTooShort { path }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut raw = [0u8; 32];
            getrandom::fill(&mut raw).map_err(PopupsError::Random)?;
            let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            let tmp = path.with_extension("tmp");
            match std::fs::write(&tmp, &hex).and_then(|()| std::fs::rename(&tmp, &path)) {
                Ok(()) => Ok(hex.into_bytes()),
                Err(source) => Err(PopupsError::Secret { path, source }),
            }
        }
        Err(source) => Err(PopupsError::Secret { path, source }),
    }
}
