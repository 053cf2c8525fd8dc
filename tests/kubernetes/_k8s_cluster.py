"""A recorded cluster: the recorded API's fixtures served from state instead of a script — Jobs created, listed,
found, their pod deleted (the Job then fails, its container terminated with 143) and the Job deleted — so a
backend's whole life can be exercised against answers shaped like the Kubernetes API reference (the conformance
suite's BASE). Every request is still recorded, and checked against the chart's Role by the test."""

from __future__ import annotations

import json
import threading
from typing import Any

from _k8s_api import Request, RecordedAPI, fixture


class RecordedCluster(RecordedAPI):
    def __init__(self, namespace: str) -> None:
        super().__init__(namespace=namespace)
        self.namespace = namespace
        self.jobs: dict[str, dict[str, Any]] = {}  # name -> {"run", "dir", "stopped"}
        self._state = threading.Lock()

    def _job(self, name: str) -> dict[str, Any]:
        j = self.jobs[name]
        doc = fixture("job_failed.json" if j["stopped"] else "job_running.json", name=name, run=j["run"],
                      dir=j["dir"], namespace=self.namespace)
        doc["metadata"]["labels"].update(j["labels"])
        return doc

    def _answer(self, req: Request) -> tuple[int, str, str]:
        ns = self.namespace
        jobs, pods, secrets = (f"/apis/batch/v1/namespaces/{ns}/jobs", f"/api/v1/namespaces/{ns}/pods",
                               f"/api/v1/namespaces/{ns}/secrets")
        with self._state:
            self.requests.append(req)
            name = req.path.rsplit("/", 1)[-1]
            if req.method == "POST" and req.path == jobs:
                meta = req.body["metadata"]
                if meta["name"] in self.jobs:
                    return self._json(409, fixture("status_already_exists.json", name=meta["name"], kind="jobs",
                                                   resource="jobs.batch"))
                self.jobs[meta["name"]] = {"run": meta["annotations"]["flower.run"], "labels": meta["labels"],
                                           "dir": meta["annotations"]["flower.dir"], "stopped": False}
                return self._json(201, self._job(meta["name"]))
            if req.method == "POST" and req.path == secrets:
                return self._json(201, fixture("secret_created.json", name=req.body["metadata"]["name"],
                                               secret=req.body["metadata"]["name"], namespace=ns))
            if req.method == "GET" and req.path == jobs:
                listing = fixture("job_list.json", namespace=ns, name="x", run="x", dir="x")
                listing["items"] = [self._job(n) for n in self.jobs]
                return self._json(200, listing)
            if req.path.startswith(jobs + "/") and req.method in ("GET", "DELETE"):
                if name not in self.jobs:  # asked for with missing_ok: gone is an answer
                    return self._json(404, fixture("status_not_found.json", name=name, kind="jobs",
                                                   resource="jobs.batch"))
                if req.method == "GET":
                    return self._json(200, self._job(name))
                del self.jobs[name]
                return self._json(200, fixture("status_success.json", name=name))
            if req.method == "GET" and req.path == pods:
                job = (req.q("labelSelector") or "").removeprefix("flower.job=")
                if job not in self.jobs:
                    return self._json(200, fixture("pod_list_empty.json", namespace=ns))
                which = "pod_list_terminated.json" if self.jobs[job]["stopped"] else "pod_list_running.json"
                listing = fixture(which, name=job, namespace=ns)
                for pod in listing["items"]:
                    for cs in pod["status"].get("containerStatuses") or []:
                        if "terminated" in cs.get("state", {}):
                            cs["state"]["terminated"]["exitCode"] = 143  # SIGTERM, as a deleted pod's container ends
                return self._json(200, listing)
            if req.method == "DELETE" and req.path.startswith(pods + "/"):
                job = name.rsplit("-", 1)[0]
                if job in self.jobs:
                    self.jobs[job]["stopped"] = True
                    return self._json(200, fixture("pod_deleting.json", name=job, namespace=ns))
            self.unexpected.append(req)
        return self._json(404, fixture("status_not_found.json", name=name, kind="jobs", resource="jobs.batch"))

    @staticmethod
    def _json(status: int, doc: Any) -> tuple[int, str, str]:
        return status, json.dumps(doc), "application/json"
