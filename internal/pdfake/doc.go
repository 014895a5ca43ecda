// Package pdfake provides recording fake prefill/decode engines that speak
// the real P/D wire protocols of vLLM (NIXL kv_transfer_params), SGLang
// (bootstrap rendezvous) and TensorRT-LLM (disaggregated_params with
// extra="forbid"), so datapath/pd and end-to-end tests can assert exactly
// what each leg received without GPUs.
//
// An Engine records every inference request (method, path, headers, body),
// whether its client closed the connection while the engine was still
// working (how tests prove a sibling leg was cancelled), and any protocol
// violation it detected. Faults are injected per engine for the next N
// requests: 500, 400, a connection drop before or after the first response
// byte, a hang, or a stall after the first byte.
//
// Engines bind 127.0.0.x loopback addresses in process (Start) or run as the
// pdfake binary (Run). Two SGLang prefills share one bootstrap port by using
// different loopback IPs, exactly like two hosts.
//
// It is under internal/, not test/, because it ships: `infergate demo` runs
// its engines as the hidden `infergate fake-engine` command of the gateway
// binary itself, so a lone binary can show P/D end to end. kvfake and
// fakeengine, which it is built on, sit beside it.
package pdfake
