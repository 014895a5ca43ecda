package enginestats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// An engine's batch limit — how many requests it runs at once (vLLM's
// --max-num-seqs, SGLang's --max-running-requests, TensorRT-LLM's
// max_num_active_requests) — is the natural size of the gateway's
// admission window in front of it. None of them puts it in its load
// families; each tells it somewhere else, if at all:
//
//   - SGLang: GET /server_info (GET /get_server_info before it was renamed)
//     returns the server arguments flattened, with internal_states, one per
//     data-parallel rank, each carrying effective_max_running_requests_per_dp
//     (what the scheduler really admits after memory limits). Their sum is
//     the endpoint's limit; without them, the top-level max_running_requests.
//   - vLLM: only GET /server_info?config_format=json, which exists when the
//     server runs with VLLM_SERVER_DEV_MODE=1; vllm_config.scheduler_config
//     .max_num_seqs is per engine core, times the data-parallel ranks behind
//     this API server. A production vLLM (dev endpoints off) tells nothing.
//   - llm-d-inference-sim: GET /admin/config returns its configuration,
//     max-num-seqs among it.
//   - TensorRT-LLM: its Prometheus text (/prometheus/metrics) has the gauge
//     trtllm_max_num_active_requests (trtllm: prefixed under Dynamo). Its
//     JSON /metrics also has maxNumActiveRequests but reading it drains the
//     iteration stats from their other consumers, so it is not read.
//
// The datapath reads these off the request path, with the context-window
// reads (ctxwindow.go's learner), and ignores what it cannot trust.

// MaxBatchLimit is the largest limit taken from an engine, the bound a
// rule's own admission_window has: a larger one is not a real batch.
const MaxBatchLimit = 1 << 16

// maxInfoBody caps a server-info answer, which holds the server's
// arguments (SGLang repeats its state per data-parallel rank; vLLM's adds
// its environment). The cap bounds what a wrong port can make the reader
// hold; the answers of real engines were not measured against it.
const maxInfoBody = 1 << 20

// Where a batch limit was learned (shown with the window it sizes).
const (
	SourceSGLang   = "sglang_server_info"
	SourceVLLM     = "vllm_server_info"
	SourceSim      = "sim_admin_config"
	SourceTRTLLM   = "trtllm_metrics"
	sglangInfoPath = "/server_info?config_format=json" // vLLM needs the query; SGLang ignores it
	sglangOldPath  = "/get_server_info"
	simConfigPath  = "/admin/config"
	trtllmPromPath = "/prometheus/metrics"
)

// BatchLimit is an engine's batch limit and where it was read.
type BatchLimit struct {
	N      int
	Source string
}

// errNoLimit: the answer names no usable batch limit.
var errNoLimit = errors.New("no usable batch limit")

// limitSource is one place an engine may tell its limit.
type limitSource struct {
	path  string
	parse func([]byte) (BatchLimit, error)
}

// limitSources are tried in order until one answers with a limit; an
// engine answers 404 to the others' paths.
var limitSources = [...]limitSource{
	{sglangInfoPath, ParseServerInfo},
	{sglangOldPath, ParseServerInfo},
	{simConfigPath, ParseSimConfig},
	{trtllmPromPath, ParseTRTLLMProm},
}

// FetchBatchLimit asks the engine at base ("http://host:port") for its
// batch limit at each place an engine may tell it. The error says why
// nothing was taken: the most telling failure (a garbage answer over a
// missing path). hc's timeout and ctx bound each GET.
func FetchBatchLimit(ctx context.Context, hc *http.Client, base string) (BatchLimit, error) {
	var why error
	for _, s := range limitSources {
		body, err := getCapped(ctx, hc, base+s.path, maxInfoBody)
		if err == nil {
			var l BatchLimit
			if l, err = s.parse(body); err == nil {
				return l, nil
			}
			err = fmt.Errorf("%s: %w", base+s.path, err)
		}
		if ctx.Err() != nil {
			return BatchLimit{}, err
		}
		if why == nil || errors.Is(why, errNotFound) && !errors.Is(err, errNotFound) {
			why = err
		}
	}
	return BatchLimit{}, why
}

// errNotFound: the engine does not serve the path (it is another engine).
var errNotFound = errors.New("not served (404)")

// getCapped GETs url and returns its 200 body of at most limit bytes.
func getCapped(ctx context.Context, hc *http.Client, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s: %w", url, errNotFound)
	default:
		return nil, fmt.Errorf("%s: %w (%d)", url, errStatus, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%s: %w", url, errTooLarge)
	}
	return body, nil
}

// limitInt decodes one JSON value as a limit: an integer in
// 1..MaxBatchLimit; anything else (absent, null, a string, a fraction,
// zero, negative, larger) is refused.
func limitInt(raw json.RawMessage) (int, bool) {
	var v int64
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v < 1 || v > MaxBatchLimit {
		return 0, false
	}
	return int(v), true
}

// ParseServerInfo is the limit in a /server_info answer: SGLang's
// (internal_states' effective limits summed over data-parallel ranks, else
// max_running_requests) or vLLM's dev-mode JSON config (max_num_seqs times
// the data-parallel ranks its API server fronts).
func ParseServerInfo(body []byte) (BatchLimit, error) {
	var info struct {
		VLLM           json.RawMessage `json:"vllm_config"`
		MaxRunning     json.RawMessage `json:"max_running_requests"`
		InternalStates []struct {
			Effective json.RawMessage `json:"effective_max_running_requests_per_dp"`
		} `json:"internal_states"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return BatchLimit{}, fmt.Errorf("%w: %v", errNoLimit, err)
	}
	if len(info.VLLM) > 0 {
		return parseVLLMConfig(info.VLLM)
	}
	if n, ok := sumRanks(info.InternalStates); ok {
		return BatchLimit{N: n, Source: SourceSGLang}, nil
	}
	if n, ok := limitInt(info.MaxRunning); ok {
		return BatchLimit{N: n, Source: SourceSGLang}, nil
	}
	return BatchLimit{}, fmt.Errorf("%w: no max_running_requests", errNoLimit)
}

// sumRanks adds SGLang's per-rank effective limits; false when there are
// none or any is not a limit (a partial sum would understate the engine).
func sumRanks(states []struct {
	Effective json.RawMessage `json:"effective_max_running_requests_per_dp"`
}) (int, bool) {
	sum := 0
	for _, s := range states {
		n, ok := limitInt(s.Effective)
		if !ok || sum+n > MaxBatchLimit {
			return 0, false
		}
		sum += n
	}
	return sum, sum > 0
}

// parseVLLMConfig reads vLLM's serialised VllmConfig. max_num_seqs bounds
// each engine core; the API server fronts data_parallel_size of them,
// only its local ones in hybrid load balancing, only its own with an
// external load balancer.
func parseVLLMConfig(raw json.RawMessage) (BatchLimit, error) {
	var cfg struct {
		Scheduler struct {
			MaxNumSeqs json.RawMessage `json:"max_num_seqs"`
		} `json:"scheduler_config"`
		Parallel struct {
			Size       json.RawMessage `json:"data_parallel_size"`
			SizeLocal  json.RawMessage `json:"data_parallel_size_local"`
			ExternalLB bool            `json:"data_parallel_external_lb"`
			HybridLB   bool            `json:"data_parallel_hybrid_lb"`
		} `json:"parallel_config"`
	}
	if raw[0] == '"' {
		return BatchLimit{}, fmt.Errorf("%w: vllm_config is text (a vLLM without config_format=json)", errNoLimit)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return BatchLimit{}, fmt.Errorf("%w: vllm_config: %v", errNoLimit, err)
	}
	n, ok := limitInt(cfg.Scheduler.MaxNumSeqs)
	if !ok {
		return BatchLimit{}, fmt.Errorf("%w: no scheduler_config.max_num_seqs", errNoLimit)
	}
	ranks := 1
	switch {
	case cfg.Parallel.ExternalLB:
	case cfg.Parallel.HybridLB:
		ranks, ok = limitInt(cfg.Parallel.SizeLocal)
	case len(cfg.Parallel.Size) > 0:
		ranks, ok = limitInt(cfg.Parallel.Size)
	}
	if !ok || n*ranks > MaxBatchLimit {
		return BatchLimit{}, fmt.Errorf("%w: data-parallel size", errNoLimit)
	}
	return BatchLimit{N: n * ranks, Source: SourceVLLM}, nil
}

// ParseSimConfig is the limit in llm-d-inference-sim's GET /admin/config
// (its max-num-seqs; a data-parallel simulator serves each rank on its own
// port).
func ParseSimConfig(body []byte) (BatchLimit, error) {
	var cfg struct {
		MaxNumSeqs json.RawMessage `json:"max-num-seqs"`
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		return BatchLimit{}, fmt.Errorf("%w: %v", errNoLimit, err)
	}
	n, ok := limitInt(cfg.MaxNumSeqs)
	if !ok {
		return BatchLimit{}, fmt.Errorf("%w: no max-num-seqs", errNoLimit)
	}
	return BatchLimit{N: n, Source: SourceSim}, nil
}

// trtllmLimitFamilies name TensorRT-LLM's batch-limit gauge, as the engine
// and as Dynamo re-export it.
var trtllmLimitFamilies = [...][]byte{[]byte("trtllm_max_num_active_requests"), []byte("trtllm:max_num_active_requests")}

// ParseTRTLLMProm is the limit in TensorRT-LLM's Prometheus text: the
// first sample of trtllm_max_num_active_requests, a whole number.
func ParseTRTLLMProm(body []byte) (BatchLimit, error) {
	for line := range bytes.Lines(body) {
		line = bytes.TrimRight(line, "\r\n")
		for _, fam := range trtllmLimitFamilies {
			rest, ok := bytes.CutPrefix(line, fam)
			if !ok || len(rest) == 0 || rest[0] != ' ' && rest[0] != '{' {
				continue
			}
			if rest[0] == '{' {
				end := labelsEnd(rest)
				if end < 0 {
					return BatchLimit{}, fmt.Errorf("%w: malformed %s", errNoLimit, fam)
				}
				rest = rest[end+1:]
			}
			fields := bytes.Fields(rest)
			if len(fields) == 0 {
				return BatchLimit{}, fmt.Errorf("%w: %s without a value", errNoLimit, fam)
			}
			v, err := strconv.ParseFloat(string(fields[0]), 64)
			if err != nil || v != float64(int64(v)) || v < 1 || v > MaxBatchLimit {
				return BatchLimit{}, fmt.Errorf("%w: %s = %s", errNoLimit, fam, fields[0])
			}
			return BatchLimit{N: int(v), Source: SourceTRTLLM}, nil
		}
	}
	return BatchLimit{}, fmt.Errorf("%w: no trtllm_max_num_active_requests", errNoLimit)
}
