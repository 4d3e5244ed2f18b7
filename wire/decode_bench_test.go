package wire

import "testing"

// BenchmarkDecode decodes the hot verbs' real frames from the traces.
func BenchmarkDecode(b *testing.B) { benchmarkDecoder(b, Decode) }

// BenchmarkDecodeReflective runs the same frames through the encoding/json
// decoder Decode replaced (the oracle), for a before/after on one machine.
func BenchmarkDecodeReflective(b *testing.B) { benchmarkDecoder(b, decodeReflect) }

func benchmarkDecoder(b *testing.B, decode func([]byte, int, int) (*Inbound, error)) {
	sends := traceSends(b, "*.raw.jsonl")
	for _, verb := range []string{"heartbeat", "claim", "release", "task_update", "chat", "ack"} {
		data := hotFrame(b, sends, verb)
		b.Run(verb, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(data, DefaultMaxFrameBytes, DefaultMaxDepth); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
