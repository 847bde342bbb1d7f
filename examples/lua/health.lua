-- GET /lua/health: a JSON health check that says how long this worker's scripts have run.
local started = hp.now()

function handle(req)
  local body = hp.json.encode({
    status = "ok",
    uptime_secs = math.floor(hp.now() - started),
    client = req.remote,
  })
  return 200, { ["Content-Type"] = "application/json" }, body
end
