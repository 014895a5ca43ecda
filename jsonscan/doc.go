// Package jsonscan reads JSON in place: it finds where values start and end,
// walks an object's members or an array's elements as byte spans, and
// decodes the few strings, numbers and booleans a caller asks for. Nothing
// is built and nothing is allocated, so a gateway can read "model" or
// "stream" out of a 1 MiB request and forward the rest byte for byte.
//
// Two levels of trust, chosen per call:
//
//   - Scan… (ScanString, ScanValue, Valid, Members with Strict) validate
//     exactly what encoding/json accepts: a body that passes is one the
//     engine parses the same way, so it can be rewritten safely.
//   - Skip… (SkipString, SkipValue, Members with Loose) only follow the
//     structure: strings end at an unescaped quote, containers are matched
//     by depth, scalars run to the next delimiter. They are for reading a
//     few fields out of a body the engine will judge anyway, or that was
//     validated before. On valid JSON both levels agree; on invalid JSON a
//     Skip never reads past the input and may accept what a Scan refuses.
//
// Decoding follows encoding/json (escapes, surrogate pairs, U+FFFD for a
// lone surrogate), so a key spelled "strea\u006d" is the key "stream", as
// the engine sees it. Equal compares a raw key with a name at the cost of a
// byte comparison when the key has no backslash, which is every key a
// client normally sends.
package jsonscan
