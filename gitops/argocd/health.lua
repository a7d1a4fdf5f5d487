-- Argo CD health check for KineticJob and KineticBatch (kinetic.dev).
-- Argo CD runs this with the live object as `obj` (Lua 5.1) and reads back
-- hs.status (Healthy, Progressing, Degraded) and hs.message.
local hs = {}
local status = obj.status

if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Kinetic operator to pick it up"
  return hs
end

-- A spec change the operator has not acted on yet says nothing about the new spec.
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. generation
  return hs
end

local function condition(kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function say(default)
  local text = status.message or default
  if status.progress ~= nil and string.find(text, status.progress, 1, true) == nil then
    text = status.progress .. " succeeded: " .. text
  end
  return text
end

local stalled = condition("Stalled")
local ready = condition("Ready")
local phase = status.phase

if (stalled ~= nil and stalled.status == "True") or phase == "FAILED" or phase == "CANCELLED" then
  hs.status = "Degraded"
  hs.message = say(phase == "CANCELLED" and "Cancelled" or "Failed")
elseif (ready ~= nil and ready.status == "True") or phase == "SUCCEEDED" then
  hs.status = "Healthy"
  hs.message = say("Succeeded")
else
  hs.status = "Progressing"
  hs.message = say(phase == "RUNNING" and "Running" or "Pending")
end
return hs
