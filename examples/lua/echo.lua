-- GET/POST /echo: answers with what it was sent.
--   curl 'http://127.0.0.1:8080/echo?name=hp'        -> GET /echo?name=hp
--   curl -d 'hello' http://127.0.0.1:8080/echo        -> hello
function handle(req)
  if req.method == "POST" then
    return 200, { ["Content-Type"] = "application/octet-stream" }, req.body
  end
  local q = req.query
  return 200, nil, req.method .. " " .. req.path .. (q ~= "" and ("?" .. q) or "") .. "\n"
end
