"""Apache Superset against cqgate, run in Superset's own venv through its REST API (Flask's
test client, no web server): add the database with options=-c cq.mode=snapshot after testing
the connection, list its tables and a window's columns, run SQL Lab queries, make a dataset
and a chart over a named window and read the chart's data. Prints one JSON object.
Arguments: cqgate's port, the stream, the window, the table, the database entry (JSON, as
Superset's API takes it). SUPERSET_CONFIG_PATH is set by the caller (an initialised metadata
database, CSRF off)."""
import json
import sys

from superset.app import create_app

port, stream, window, table, entry = sys.argv[1:6]
with open(entry) as f:                  # clients/superset/database.json, on this port
    DATABASE = json.loads(f.read().replace("55433", port))
out = {}
app = create_app()
client = app.test_client()


def call(method, path, body=None, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = getattr(client, method)(path, json=body, headers=headers)
    return r.status_code, r.get_json(silent=True)


status, login = call("post", "/api/v1/security/login",
                     {"username": "admin", "password": "admin", "provider": "db"})
token = login["access_token"]
out["test_connection"] = call("post", "/api/v1/database/test_connection/",
                              {k: DATABASE[k] for k in ("database_name", "sqlalchemy_uri",
                                                        "extra")}, token)
status, made = call("post", "/api/v1/database/", DATABASE, token)
db = made["id"]
status, tables = call("get", f"/api/v1/database/{db}/tables/?q=(schema_name:public,force:!t)",
                      token=token)
out["tables"] = sorted((t["value"], t["type"]) for t in tables["result"])
status, meta = call("get", f"/api/v1/database/{db}/table_metadata/?name={window}&schema=public",
                    token=token)
out["window_columns"] = [(c["name"], str(c["type"])) for c in meta["columns"]]


def sql_lab(sql):
    status, res = call("post", "/api/v1/sqllab/execute/",
                       {"database_id": db, "sql": sql, "schema": "public", "runAsync": False,
                        "client_id": f"c{abs(hash(sql)) % 10 ** 9}"}, token)
    return status, (res.get("data") if status == 200 else res)


out["sql_table"] = sql_lab(f"SELECT id, label FROM {table} ORDER BY id")
out["sql_window"] = sql_lab(f"SELECT a, n FROM {window} ORDER BY a")
out["sql_stream"] = sql_lab(f"SELECT a, count(*) AS c FROM {stream} GROUP BY a ORDER BY a")
status, dataset = call("post", "/api/v1/dataset/",
                       {"database": db, "schema": "public", "table_name": window}, token)
params = {"viz_type": "table", "groupby": ["a"],
          "metrics": [{"expressionType": "SQL", "sqlExpression": "SUM(n)", "label": "total"}]}
status, chart = call("post", "/api/v1/chart/",
                     {"slice_name": "per a", "viz_type": "table", "datasource_id": dataset["id"],
                      "datasource_type": "table", "params": json.dumps(params)}, token)
query = {"datasource": {"id": dataset["id"], "type": "table"}, "force": True,
         "queries": [{"columns": ["a"], "metrics": params["metrics"], "orderby": [["a", True]],
                      "row_limit": 100}],
         "result_format": "json", "result_type": "full"}
status, data = call("post", "/api/v1/chart/data", query, token)
out["chart"] = (status, chart.get("id"), data["result"][0]["data"] if status == 200 else data)
print(json.dumps(out, default=str))
