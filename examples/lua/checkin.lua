-- POST /checkin {"user": "ada", "place": "cafe-7"}: a check-in service that writes behind.
-- The check-in is appended to the script table "checkins" (hp_lua_rows) and counted per place
-- (hp_lua_counters: table "places", key the place, column "checkins"); both go through the
-- worker's journal before the answer leaves and reach the database in the store's next batch.
-- The answer also says how many check-ins this server has seen at the place (hp.shared).
local function answer(status, t)
  return status, { ["Content-Type"] = "application/json" }, hp.json.encode(t)
end

function handle(req)
  if req.method ~= "POST" then
    return answer(405, { error = "use POST with a JSON body" })
  end
  local ok, body = pcall(hp.json.decode, req.body)
  if not ok or type(body) ~= "table" or type(body.user) ~= "string" or type(body.place) ~= "string"
      or #body.user == 0 or #body.place == 0 or #body.place > 255 then
    return answer(400, { error = 'body: {"user": "...", "place": "..."} expected' })
  end
  local saved, err = hp.store.enqueue("checkins", { user = body.user, place = body.place })
  if not saved then
    return 503, { ["Retry-After"] = "1" }, err .. "\n"
  end
  hp.store.add("places", body.place, "checkins", 1)
  local here = hp.shared:incr("checkins:" .. body.place, 1, 0)
  return answer(201, { place = body.place, checkins_here = here })
end
