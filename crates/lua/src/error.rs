//! The Lua routes' errors: what stops the scripts from loading at start or on a reload.
//! A request's own failure is not one of these: it is answered 500 and counted.

/// Why the scripts could not be loaded (at start the server stops; on a reload the scripts
/// before keep serving).
#[derive(Debug, thiserror::Error)]
pub enum LuaError {
    /// A script file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The script (`lua.routes[].script`).
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A script did not compile, its top-level code failed, or it defines no `handle`.
    #[error("{}", named(script, message))]
    Script {
        /// The script.
        script: String,
        /// Lua's message (with the line), or what is missing.
        message: String,
    },
    /// The interpreter could not be set up (out of memory for the sandbox, say). Lua's
    /// message as text: its error type cannot move between threads.
    #[error("cannot set up the Lua interpreter: {0}")]
    Vm(String),
}

impl From<mlua::Error> for LuaError {
    fn from(e: mlua::Error) -> LuaError {
        LuaError::Vm(e.to_string())
    }
}

/// `message` about `script`, naming the script once: Lua's own messages name it already (as
/// their chunk name, `script:LINE: ...`).
fn named(script: &str, message: &str) -> String {
    if message.contains(&format!("{script}:")) {
        message.to_string()
    } else {
        format!("{script}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_named_once() {
        let e = |message: &str| LuaError::Script {
            script: "lua/bad.lua".into(),
            message: message.into(),
        };
        assert_eq!(
            e("syntax error: lua/bad.lua:2: 'end' expected near 'nil'").to_string(),
            "syntax error: lua/bad.lua:2: 'end' expected near 'nil'"
        );
        assert_eq!(
            e("defines no function handle(req)").to_string(),
            "lua/bad.lua: defines no function handle(req)"
        );
    }
}
