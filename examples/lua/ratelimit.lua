-- POST /hit?key=K: counts hits per key across all workers in hp.shared, at most LIMIT per
-- WINDOW seconds per key; over it, 429 with Retry-After. The count expires with its window.
local LIMIT, WINDOW = 10, 60

function handle(req)
  local key = req:arg("key")
  if not key or key == "" then
    return 400, nil, "key: missing (?key=...)\n"
  end
  local window = math.floor(hp.now() / WINDOW)
  local n, err = hp.shared:incr("hits:" .. window .. ":" .. key, 1, 0, WINDOW)
  if not n then
    hp.log("error", "ratelimit:", err)
    return 503, nil, "try again\n"
  end
  if n > LIMIT then
    hp.metrics.incr("ratelimit_refused")
    local retry = WINDOW - math.floor(hp.now()) % WINDOW
    return 429, { ["Retry-After"] = tostring(retry) }, "too many hits for " .. key .. "\n"
  end
  hp.metrics.incr("ratelimit_allowed")
  return 200, { ["Content-Type"] = "application/json" },
    hp.json.encode({ key = key, hits = n, limit = LIMIT })
end
