package engine

import "time"

// SetClockForModel replaces e's clock (the model-based test runs a virtual
// clock so that windows expire when the model says time has passed).
func SetClockForModel(e *Engine, now func() time.Time) { e.now = now }
