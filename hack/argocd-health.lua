-- Argo CD custom health check for gpusizer.dev/GPUWorkload.
--
-- Install it in argocd-cm under the key
--   resource.customizations.health.gpusizer.dev_GPUWorkload
-- (see docs/gitops.md). Argo CD runs it with gopher-lua (Lua 5.1) and a global `obj` holding the
-- live object; tests/gitops runs the same file with Lua 5.1 from lupa.
--
-- The operator writes kstatus conditions (Ready, Reconciling, Stalled) with observedGeneration,
-- and a phase: Pending | Estimated | Measuring | Ready | Rejected | Failed.
--   Healthy      Ready=True for the current generation.
--   Degraded     phase Rejected or Failed, or Stalled=True: the spec cannot run as written.
--   Progressing  anything else: no status yet, status for an older generation, Reconciling,
--                estimating or measuring.

local hs = {}

local function condition(status, ctype)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function text(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for gpu-sizer to write status (is the operator running?)"
  return hs
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
if generation ~= nil then
  if status.observedGeneration == nil or status.observedGeneration < generation then
    hs.status = "Progressing"
    hs.message = "Waiting for gpu-sizer to observe generation " .. tostring(generation)
    if status.observedGeneration ~= nil then
      hs.message = hs.message .. " (status is for generation " .. tostring(status.observedGeneration) .. ")"
    end
    return hs
  end
end

local ready = condition(status, "Ready")
local stalled = condition(status, "Stalled")
local reconciling = condition(status, "Reconciling")

if status.phase == "Rejected" or status.phase == "Failed" or (stalled ~= nil and stalled.status == "True") then
  hs.status = "Degraded"
  hs.message = text(stalled, text(ready, "GPUWorkload is " .. tostring(status.phase)))
  return hs
end

-- A condition written for an older generation says nothing about the current spec.
local function current(c)
  return c ~= nil and (generation == nil or c.observedGeneration == nil or c.observedGeneration >= generation)
end

if current(ready) and ready.status == "True" then
  hs.status = "Healthy"
  local rec = status.recommendation
  if rec ~= nil and rec.gpuClass ~= nil then
    hs.message = "Recommended " .. tostring(rec.gpuCount or 1) .. " x " .. rec.gpuClass
    if rec.basis ~= nil then
      hs.message = hs.message .. " (basis " .. rec.basis .. ")"
    end
  else
    hs.message = text(ready, "Ready")
  end
  return hs
end

hs.status = "Progressing"
if current(reconciling) and reconciling.status == "True" then
  hs.message = text(reconciling, "Reconciling")
elseif status.phase ~= nil then
  local fresh = nil
  if current(ready) then
    fresh = ready
  end
  hs.message = text(fresh, "GPUWorkload is " .. status.phase)
else
  hs.message = "Waiting for the Ready condition"
end
return hs
