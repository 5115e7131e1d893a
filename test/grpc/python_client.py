"""
A strict client of every gRPC service of a running quantd, written as a Python user would write
one: stubs generated from proto/ by protoc and grpc_python_plugin (test/grpc/python-client.test.ts
generates them; Debian's python3-grpcio runs them), and no quantd code.

    python3 python_client.py STUBS TARGET MODEL_PATH

STUBS: the directory of the generated modules (quantd/v1/*_pb2*.py, inference/, and the health and
reflection stubs as health_v1, reflection_v1, reflection_v1alpha); TARGET: host:port of the gRPC
server; MODEL_PATH: a .safetensors model under the server's data directory, for Jobs.Submit.

Checks what a client can check on its own (assertions, with what went wrong), and prints one JSON
object of what the caller compares with the HTTP API and the CLI: digests of results, names,
counts. Exits non-zero on the first failed check.
"""

import hashlib
import importlib
import json
import struct
import sys
import time


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def floats(n, seed):
    """Deterministic float32 values; the caller builds the same ones."""
    return [((i * 37 + seed * 11) % 29 - 14) * 0.125 for i in range(n)]


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def safetensors(tensors):
    """A safetensors file of float32 tensors: [(name, shape, values)]."""
    header, data = {}, b""
    for name, shape, values in tensors:
        raw = f32(values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main(stubs, target, model_path):
    sys.path.insert(0, stubs)
    import grpc
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    # every generated module imports (a docstring copied from a comment with a backslash
    # escape in it is a SyntaxError here)
    names = [
        "quantd.v1.quantd_pb2",
        "quantd.v1.quantd_pb2_grpc",
        "quantd.v1.jobs_pb2",
        "quantd.v1.jobs_pb2_grpc",
        "quantd.v1.calibration_pb2",
        "quantd.v1.calibration_pb2_grpc",
        "inference.grpc_service_pb2",
        "inference.grpc_service_pb2_grpc",
        "health_v1_pb2",
        "health_v1_pb2_grpc",
        "reflection_v1_pb2",
        "reflection_v1_pb2_grpc",
        "reflection_v1alpha_pb2",
        "reflection_v1alpha_pb2_grpc",
    ]
    m = {name.split(".")[-1]: importlib.import_module(name) for name in names}
    q, qg = m["quantd_pb2"], m["quantd_pb2_grpc"]
    jobs, jobsg = m["jobs_pb2"], m["jobs_pb2_grpc"]
    cal, calg = m["calibration_pb2"], m["calibration_pb2_grpc"]
    oip, oipg = m["grpc_service_pb2"], m["grpc_service_pb2_grpc"]
    health, healthg = m["health_v1_pb2"], m["health_v1_pb2_grpc"]

    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=20)
    report = {}

    def code_of(err):
        """The quantd-code of a failed call's trailing metadata."""
        return dict(err.trailing_metadata() or ()).get("quantd-code")

    def refused(call):
        try:
            call()
        except grpc.RpcError as err:
            return {"status": err.code().name, "quantd_code": code_of(err)}
        raise AssertionError("the call succeeded")

    # --- quantd.v1.Quantizer: the four unary calls, QuantizeStream, an error ---------------------
    quantizer = qg.QuantizerStub(channel)
    values = floats(32, 1)
    data = f32(values)
    tensor = q.Tensor(name="tensor", dtype="float32", shape=[4, 8], data=data)
    # axis is a proto3 optional: set to 0, it is sent (presence), not dropped as a default
    spec = q.Spec(qdtype="int8", scheme="per_channel", axis=0)
    assert spec.HasField("axis") and not spec.HasField("group_size"), "proto3 optional presence"
    quantized = quantizer.Quantize(q.OperationRequest(tensor=tensor, spec=spec), timeout=30).safetensors
    as_tensors = quantizer.Quantize(
        q.OperationRequest(tensor=tensor, spec=spec, form=q.TENSORS), timeout=30
    )
    dequantized = quantizer.Dequantize(q.OperationRequest(safetensors=quantized), timeout=30).safetensors
    fake = quantizer.FakeQuantize(q.OperationRequest(tensor=tensor, spec=spec), timeout=30).safetensors
    qparams = quantizer.ChooseQParams(q.OperationRequest(tensor=tensor, spec=spec), timeout=30).safetensors

    def stream_requests():
        header = q.StreamHeader(
            operation="quantize",
            spec=spec,
            total_bytes=len(data),
            tensor=q.Tensor(name="tensor", dtype="float32", shape=[4, 8]),
            chunk_bytes=1024,
        )
        yield q.StreamRequest(header=header)
        yield q.StreamRequest(chunk=q.Chunk(offset=0, data=data[:64]))
        yield q.StreamRequest(chunk=q.Chunk(offset=64, data=data[64:]))

    parts = list(quantizer.QuantizeStream(stream_requests(), timeout=30))
    assert parts[0].WhichOneof("part") == "result", parts[0]
    streamed = b"".join(p.chunk.data for p in parts[1:])
    assert len(streamed) == parts[0].result.total_bytes, "the chunks carry total_bytes"
    assert streamed == quantized, "QuantizeStream gives the unary Quantize's bytes"
    report["quantizer"] = {
        "quantize": sha256(quantized),
        "dequantize": sha256(dequantized),
        "fake_quantize": sha256(fake),
        "qparams": sha256(qparams),
        "stream_chunks": len(parts) - 1,
        # a map<string, string> read back as a dict
        "metadata": dict(as_tensors.metadata),
        "stream_metadata": dict(parts[0].result.metadata),
        "tensors": [[t.name, t.dtype, list(t.shape)] for t in as_tensors.tensors],
        "error": refused(
            lambda: quantizer.Quantize(
                q.OperationRequest(tensor=tensor, spec=q.Spec(qdtype="int9")), timeout=30
            )
        ),
    }

    # --- quantd.v1.Jobs ---------------------------------------------------------------------------
    jobs_stub = jobsg.JobsStub(channel)
    job = jobs_stub.Submit(
        jobs.SubmitJobRequest(path=model_path, spec=q.Spec(qdtype="int8", scheme="per_channel", axis=0)),
        timeout=30,
    )
    assert job.state == "queued", job
    assert not job.HasField("started_at"), "a queued job has no start time (optional unset)"
    deadline = time.time() + 60
    while job.state in ("queued", "running"):
        assert time.time() < deadline, "the job did not finish in 60 s"
        time.sleep(0.1)
        job = jobs_stub.Get(jobs.JobId(id=job.id), timeout=30)
    assert job.state == "succeeded", job
    assert job.HasField("finished_at") and job.progress.HasField("tensors_total"), job
    listed = jobs_stub.List(jobs.ListJobsRequest(page_size=10), timeout=30)
    files = {}
    first_chunks = {}
    for chunk in jobs_stub.Result(jobs.ResultRequest(id=job.id), timeout=30):
        if chunk.offset == 0:
            # optional fields: set on a file's first chunk only
            assert chunk.HasField("total_bytes"), chunk.file
            first_chunks[chunk.file] = chunk
        else:
            assert not chunk.HasField("total_bytes"), chunk.file
        assert chunk.offset == len(files.get(chunk.file, b"")), "chunks in order"
        files[chunk.file] = files.get(chunk.file, b"") + chunk.data
    for f in job.result.files:
        got = files[f.name]
        assert len(got) == f.bytes == first_chunks[f.name].total_bytes, f.name
        if f.HasField("sha256"):
            assert sha256(got) == f.sha256, f.name
    for name, body in files.items():
        # for the caller to compare with the CLI's file (cwd: its scratch directory)
        with open("job-" + name, "wb") as out:
            out.write(body)
    job_report = b"".join(c.data for c in jobs_stub.Report(jobs.JobId(id=job.id), timeout=30))
    cancelled = jobs_stub.Cancel(jobs.JobId(id=job.id), timeout=30)
    report["jobs"] = {
        "id": job.id,
        "listed": job.id in [j.id for j in listed.jobs],
        "files": {name: sha256(body) for name, body in files.items()},
        "recorded_sha256": {f.name: f.sha256 for f in job.result.files if f.HasField("sha256")},
        "report_keys": sorted(json.loads(job_report)),
        "cancel_state": cancelled.state,
        "after_cancel": refused(lambda: jobs_stub.Get(jobs.JobId(id=job.id), timeout=30)),
    }

    # --- quantd.v1.Calibrations -------------------------------------------------------------------
    calibrations = calg.CalibrationsStub(channel)
    recipe = {
        "observers": [
            {"match": "a.input", "observer": {"kind": "min_max"}},
            {"match": "lin.input", "statistics": "linear"},
        ]
    }
    session = calibrations.Create(cal.CreateCalibrationRequest(recipe_json=json.dumps(recipe)), timeout=30)
    batch = safetensors([("a.input", [8], floats(8, 2)), ("lin.input", [2, 4], floats(8, 3))])

    def batches():
        yield cal.CalibrationBatch(id=session.id, safetensors=batch)
        yield cal.CalibrationBatch(safetensors=batch)

    observed = calibrations.Observe(batches(), timeout=30)
    got = calibrations.Get(cal.CalibrationId(id=session.id), timeout=30)
    sessions = calibrations.List(cal.ListCalibrationsRequest(), timeout=30)
    cal_qparams = calibrations.QParams(cal.CalibrationId(id=session.id), timeout=30).safetensors
    exported = json.loads(calibrations.Export(cal.CalibrationId(id=session.id), timeout=30).json)
    statistics = b"".join(
        c.data for c in calibrations.Statistics(cal.CalibrationId(id=session.id), timeout=30)
    )
    calibrations.Delete(cal.CalibrationId(id=session.id), timeout=30)
    linear = calibrations.LinearError(
        cal.LinearErrorRequest(
            safetensors=safetensors([("x", [3, 4], floats(12, 4)), ("weight", [2, 4], floats(8, 5))]),
            weight_spec={"qdtype": "int8", "scheme": "per_channel"},
        ),
        timeout=30,
    )
    (qp_header_len,) = struct.unpack("<Q", cal_qparams[:8])
    report["calibrations"] = {
        "batches": observed.batches,
        "folded": observed.folded,
        "observed": sorted(observed.observed),
        "observers": [[o.name, o.kind, o.observed] for o in got.observers],
        "statistics": [[s.name, s.in_features, s.tokens] for s in got.statistics],
        "listed": session.id in [s.id for s in sessions.calibrations],
        "qparams": sorted(k for k in json.loads(cal_qparams[8 : 8 + qp_header_len]) if k != "__metadata__"),
        "export_format": exported.get("format"),
        "statistics_bytes": len(statistics),
        "after_delete": refused(lambda: calibrations.Get(cal.CalibrationId(id=session.id), timeout=30)),
        "linear_error": {
            "n": linear.n,
            "in_features": linear.in_features,
            "out_features": linear.out_features,
            "weight_only_sqnr_db": linear.weight_only.sqnr_db,
        },
    }

    # --- inference.GRPCInferenceService (Open Inference Protocol) ------------------------------
    inference = oipg.GRPCInferenceServiceStub(channel)
    infer = inference.ModelInfer(
        oip.ModelInferRequest(
            model_name="quantize",
            inputs=[oip.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[4, 8])],
            raw_input_contents=[data],
            # a map of messages: map<string, InferParameter>
            parameters={"qdtype": oip.InferParameter(string_param="uint8")},
        ),
        timeout=30,
    )
    outputs = {o.name: raw for o, raw in zip(infer.outputs, infer.raw_output_contents)}
    per_tensor = quantizer.Quantize(
        q.OperationRequest(tensor=tensor, spec=q.Spec(qdtype="uint8"), form=q.TENSORS), timeout=30
    )
    codes = next(t.data for t in per_tensor.tensors if t.name == "tensor")
    assert outputs["codes"] == codes, "ModelInfer's codes are Quantize's"
    metadata = inference.ServerMetadata(oip.ServerMetadataRequest(), timeout=30)
    model = inference.ModelMetadata(oip.ModelMetadataRequest(name="quantize"), timeout=30)
    report["inference"] = {
        "live": inference.ServerLive(oip.ServerLiveRequest(), timeout=30).live,
        "ready": inference.ServerReady(oip.ServerReadyRequest(), timeout=30).ready,
        "model_ready": inference.ModelReady(oip.ModelReadyRequest(name="quantize"), timeout=30).ready,
        "server": [metadata.name, list(metadata.extensions)],
        "model_inputs": [i.name for i in model.inputs],
        "outputs": [[o.name, o.datatype, list(o.shape)] for o in infer.outputs],
        "codes": sha256(outputs["codes"]),
        "output_parameters": {
            o.name: {k: v.WhichOneof("parameter_choice") for k, v in o.parameters.items()}
            for o in infer.outputs
        },
    }

    # --- grpc.health.v1.Health --------------------------------------------------------------------
    health_stub = healthg.HealthStub(channel)
    services = ["", "quantd.v1.Quantizer", "quantd.v1.Jobs", "quantd.v1.Calibrations",
                "inference.GRPCInferenceService"]
    statuses = {}
    for name in services:
        response = health_stub.Check(health.HealthCheckRequest(service=name), timeout=30)
        statuses[name] = health.HealthCheckResponse.ServingStatus.Name(response.status)
    report["health"] = statuses

    # --- server reflection: v1 and v1alpha ---------------------------------------------------------
    def reflect(version, **request):
        pb2, pb2_grpc = m["reflection_%s_pb2" % version], m["reflection_%s_pb2_grpc" % version]
        stub = pb2_grpc.ServerReflectionStub(channel)
        responses = list(stub.ServerReflectionInfo(iter([pb2.ServerReflectionRequest(**request)]), timeout=30))
        assert len(responses) == 1, responses
        response = responses[0]
        assert not response.HasField("error_response"), response.error_response
        return response

    def files_of(response):
        return [descriptor_pb2.FileDescriptorProto.FromString(b)
                for b in response.file_descriptor_response.file_descriptor_proto]

    generated = {
        "quantd/v1/quantd.proto": q,
        "quantd/v1/jobs.proto": jobs,
        "quantd/v1/calibration.proto": cal,
        "inference/grpc_service.proto": oip,
    }
    reflection = {}
    for version in ("v1", "v1alpha"):
        listed_services = sorted(s.name for s in reflect(version, list_services="*").list_services_response.service)
        by_name = {}
        for name in generated:
            served = files_of(reflect(version, file_by_filename=name))
            assert served[0].name == name, (name, [f.name for f in served])
            for f in served:
                by_name[f.name] = f
        by_symbol = {}
        for symbol in listed_services + ["quantd.v1.OperationResponse", "quantd.v1.Jobs.Result"]:
            by_symbol[symbol] = files_of(reflect(version, file_containing_symbol=symbol))[0].name
        # A fresh pool takes every file, imports first: the C++ descriptor checks protoc runs
        # (map entries named FieldEntry and not set by hand, proto3 optional, type names)
        pool = descriptor_pool.DescriptorPool()
        added = set()
        while len(added) < len(by_name):
            ready = [f for n, f in sorted(by_name.items()) if n not in added and set(f.dependency) <= added]
            assert ready, "the files served import files not served: %s" % sorted(by_name)
            for f in ready:
                pool.Add(f)
                added.add(f.name)
        # each is the descriptor protoc compiled into the stubs, plus the comments and the JSON
        # names (which the Python generator leaves out of what it embeds)
        same_as_protoc = {}
        with_comments = {}
        for name, module in generated.items():
            served = descriptor_pb2.FileDescriptorProto()
            served.CopyFrom(by_name[name])
            with_comments[name] = served.HasField("source_code_info")
            served.ClearField("source_code_info")
            without_json_names(served.message_type)
            compiled = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
            without_json_names(compiled.message_type)
            same_as_protoc[name] = served == compiled
        # messages built from the reflected descriptors read what the stubs' classes wrote
        reflected = message_factory.MessageFactory(pool).GetPrototype(
            pool.FindMessageTypeByName("quantd.v1.OperationResponse")
        )
        read_back = reflected.FromString(as_tensors.SerializeToString())
        spec_descriptor = pool.FindMessageTypeByName("quantd.v1.Spec")
        axis = spec_descriptor.fields_by_name["axis"]
        response_descriptor = pool.FindMessageTypeByName("quantd.v1.OperationResponse")
        reflection[version] = {
            "services": listed_services,
            "files": sorted(by_name),
            "by_symbol": by_symbol,
            "same_as_protoc": same_as_protoc,
            "with_comments": with_comments,
            "map_entries": [t.name for t in response_descriptor.nested_types],
            "axis_oneof": axis.containing_oneof.name if axis.containing_oneof else None,
            "metadata_read_back": dict(read_back.metadata) == dict(as_tensors.metadata),
            "unknown_file": refused_reflection(reflect, version),
        }
    report["reflection"] = reflection
    channel.close()
    print(json.dumps(report, sort_keys=True))


def without_json_names(messages):
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        without_json_names(message.nested_type)


def refused_reflection(reflect, version):
    """The error_response of a lookup of a file the server does not have."""
    try:
        reflect(version, file_by_filename="quantd_v1.proto")
    except AssertionError as err:
        return str(err.args[0].error_code) if err.args and hasattr(err.args[0], "error_code") else str(err)
    return "found"


if __name__ == "__main__":
    main(*sys.argv[1:4])
