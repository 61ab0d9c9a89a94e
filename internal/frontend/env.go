package frontend

import (
	"io"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Env is what every front-end step needs: the configuration, the path it
// was read from (handed to the local host binary with remote: local) and
// the driver's streams. stdout is protocol output only (the DEPLOY_ID, the
// original TM script's output); everything rbdfence says goes to stderr.
type Env struct {
	Cfg        *config.Config
	ConfigPath string
	Stdout     io.Writer
	Stderr     io.Writer
	Log        *Log
	// Broken is the configuration error of an Env made by BrokenEnv: every
	// rbdfence step fails with it; wrapped originals still run.
	Broken error
	// control is the ssh master rbdfence's own sessions share where the
	// user's ssh config has none (sshcontrol.go).
	control control
}

// LoadEnv reads the configuration at configPath ("" means $RBDFENCE_CONFIG,
// else /etc/one/rbdfence.yaml, which may be absent) and returns the Env.
// A bad configuration is an outcome.Usage *Error naming the key.
func LoadEnv(configPath string, stdout, stderr io.Writer) (*Env, error) {
	path := config.Path(configPath)
	cfg, err := config.Load(path, configPath != "" || path != config.DefaultPath)
	if err != nil {
		return nil, errorf(outcome.Usage, -1, "rbdfence: %v", err)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &Env{Cfg: cfg, ConfigPath: path, Stdout: stdout, Stderr: stderr, Log: NewLog(stderr, -1)}, nil
}

// BrokenEnv returns an Env for a wrapper whose configuration could not be
// loaded (err): rbdfence's own step fails with err, while the wrapped
// original still runs, bounded by the default timeouts.
func BrokenEnv(err error, stdout, stderr io.Writer) *Env {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &Env{Cfg: config.Default(), Stdout: stdout, Stderr: stderr, Log: NewLog(stderr, -1), Broken: err}
}
