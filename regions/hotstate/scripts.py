"""The Lua scripts of the Redis hot state: each does its compare-and-set atomically."""

from __future__ import annotations

# The same rules as is_newer and stored_seq, atomically, in Redis. The stored order is
# "seq sent_at bucket received_at session"; rows of older releases have the first three only.
PUT_HEARTBEAT_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local fresh = 1
local seq, sent, recv = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[8])
local session, hold = ARGV[9], tonumber(ARGV[10])
local keep = ARGV[2]
if old then
  local oseq, osent, obucket, orecv, osession =
    string.match(old, '^(%S+) (%S+) (%S+) ?(%S*) ?(%S*)$')
  oseq, osent, orecv = tonumber(oseq), tonumber(osent), tonumber(orecv)
  local newer = session ~= osession or seq > oseq
  if not newer and session == '' and sent >= osent + tonumber(ARGV[6]) then newer = true end
  if not newer and (orecv == nil or recv >= orecv + hold) then newer = true end
  if not newer then return {0, 0} end
  if obucket == ARGV[4] then fresh = 0 end
  if session == osession and orecv ~= nil and seq > oseq then
    local limit = oseq + math.floor(tonumber(ARGV[11]) * (math.max(0, recv - orecv) + hold)) + 1
    if seq > limit then keep = string.format('%.0f', limit) end
  end
end
local meta = keep .. ' ' .. ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[8]
if session ~= '' then meta = meta .. ' ' .. session end
redis.call('HSET', KEYS[1], ARGV[1], meta)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[5])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[7])
local drill = redis.call('GET', KEYS[4])
if drill then redis.call('DEL', KEYS[4]) end
return {1, fresh, drill}
"""

# Take the tick lock and, with it, the next fencing token (never below ARGV[3]: a Redis that
# lost its data starts counting again from where the database says the last tick was).
ACQUIRE_LUA = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local fence = redis.call('INCR', KEYS[2])
if fence < tonumber(ARGV[3]) then
  fence = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], fence)
end
return fence
"""

RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# Store a tick's state unless a newer lease was taken since (the fencing check), publish its
# table, and queue the events the database did not take; all or nothing.
SAVE_TICK_LUA = """
local fence = tonumber(ARGV[1])
if fence >= 0 and tonumber(redis.call('GET', KEYS[1]) or '0') > fence then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4])
for i = 8, #ARGV do redis.call('RPUSH', KEYS[5], ARGV[i]) end
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[6], ARGV[6])
  redis.call('SET', KEYS[7], ARGV[5])
  redis.call('PUBLISH', ARGV[7], ARGV[6])
end
return 1
"""

RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
