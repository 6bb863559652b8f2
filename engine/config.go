package engine

import "github.com/trellis-proxy/trellis-proxy/engine/worker"

// The configuration and the observers' interfaces live with the workers
// (engine/worker); these aliases keep them the engine's public API.
type (
	// Config holds the engine's knobs (D17). Zero values take the defaults.
	Config = worker.Config
	// StagingMode says whether this process stands for the staging singleton.
	StagingMode = worker.StagingMode
	// Metrics receives seal, page and build-task events.
	Metrics = worker.Metrics
	// TransformMetrics is a Metrics that also keeps per-transform figures.
	TransformMetrics = worker.TransformMetrics
	// WorkerState is what one worker of this process is doing.
	WorkerState = worker.WorkerState
)

const (
	StagingAuto = worker.StagingAuto // take the staging lock when free (default)
	StagingOn   = worker.StagingOn   // must stand for staging
	StagingOff  = worker.StagingOff  // never stage
)
