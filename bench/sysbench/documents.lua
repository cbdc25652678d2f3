-- Point operations on JSON documents for sysbench 1.0 (pgsql driver), the same statements for
-- PostgreSQL (a jsonb table with a unique expression index on the key) and for Strata (a table
-- keyed by `id`): point selects by key, and updates of one document by key. One statement per
-- event, in autocommit. Options:
--   --table-size=N    documents in `docs` (ids "1".."N"), loaded before the run
--   --write-pct=P     percent of events that update (0: point selects only; 5: 95/5; 50: 50/50)
--   --select-by=PATH  the path point selects look documents up by: id (the key) or name
--                     ("user <id>", through a secondary index where the table has one)
-- Run by bench/oltp.py, which loads the table and parses the report.

sysbench.cmdline.options = {
   ["table-size"] = {"Documents in the table", 10000},
   ["write-pct"] = {"Percent of events that are updates", 0},
   ["select-by"] = {"Path point selects look up: id or name", "id"},
}

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   if sysbench.opt.select_by ~= "id" and sysbench.opt.select_by ~= "name" then
      error("--select-by must be id or name")
   end
   select_stmt = con:prepare(
      "SELECT data FROM docs WHERE data->>'" .. sysbench.opt.select_by .. "' = ?")
   select_id = select_stmt:bind_create(sysbench.sql.type.VARCHAR, 32)
   select_stmt:bind_param(select_id)
   update_stmt = con:prepare(
      "UPDATE docs SET data = jsonb_set(data, '{n}', to_jsonb((data->>'n')::int + 1)) " ..
      "WHERE data->>'id' = ?")
   update_id = update_stmt:bind_create(sysbench.sql.type.VARCHAR, 16)
   update_stmt:bind_param(update_id)
end

function thread_done()
   select_stmt:close()
   update_stmt:close()
   con:disconnect()
end

function event()
   local id = tostring(sysbench.rand.uniform(1, sysbench.opt.table_size))
   if sysbench.rand.uniform(1, 100) <= sysbench.opt.write_pct then
      update_id:set(id)
      update_stmt:execute()
   else
      if sysbench.opt.select_by == "name" then
         select_id:set("user " .. id)
      else
         select_id:set(id)
      end
      local rs = select_stmt:execute()
      if rs then
         rs:free()
      end
   end
end
