// Package reqbody reads request bodies into memory so that a declared size
// costs nothing until its bytes arrive.
//
// A body is read into pooled chunks that grow (4 KiB, 16 KiB, 64 KiB, …) as
// bytes come in, and is copied once into an exactly sized buffer when it is
// complete. Content-Length is only an upper bound to check, never an
// allocation size (except for tiny bodies, which are read in place). Every
// chunk and every final buffer is charged to one Budget shared by all
// listeners; a read that would take the total over Options.MaxInFlightBytes
// fails with ErrOverloaded, which the datapath answers 503 overloaded with
// Retry-After. The charge of a completed body is returned by Body.Release
// when its request ends.
//
// Final buffers are never recycled: parts of a body may outlive the request
// (a tokenize flight, the prefix index), so only the chunks, which never
// leave this package, are pooled.
package reqbody
