package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/synapse-hub/synapse/client"
)

// sdkAgent is an agent of the Go SDK, registered with its defaults.
type sdkAgent struct{ c *client.Client }

func (a *sdkAgent) agentName() string { return a.c.Name() }

func (a *sdkAgent) claim(ctx context.Context, task string, paths []string) (bool, error) {
	_, err := a.c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: paths})
	if _, refused := errors.AsType[*client.Refused](err); refused {
		return true, nil
	}
	return false, err
}

func (a *sdkAgent) release(ctx context.Context, task string) error {
	_, err := a.c.Release(ctx, task, client.ReleaseOptions{})
	if _, refused := errors.AsType[*client.Refused](err); refused {
		return nil
	}
	return err
}

// runSDKLoad is RunLoad with Go SDK agents (LoadConfig.SDK): the connect
// storm of every agent through client.Dial, then the cycling phase through
// Claim and Release.
func runSDKLoad(ctx context.Context, cfg LoadConfig, res LoadResult, progress func(string, ...any)) (LoadResult, error) {
	total := cfg.Agents + cfg.Idle
	agents := make([]*sdkAgent, total)
	errs := make([]error, total)
	storm := startStorm(cfg)
	var wg sync.WaitGroup
	sem := make(chan struct{}, dialsInFlight)
	for i := range agents {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			c, err := client.Dial(dctx, client.Options{URI: cfg.URI, Token: cfg.Token, TLS: cfg.TLS, Name: fmt.Sprintf("load%d/agent", i), NoReconnect: true})
			if err == nil {
				agents[i] = &sdkAgent{c}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	defer func() {
		var wg sync.WaitGroup
		for _, a := range agents {
			if a != nil {
				wg.Go(func() { a.c.Close() })
			}
		}
		wg.Wait()
	}()
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("bench: connect: %w", err)
	}
	storm.end(cfg, &res)
	progress("%d SDK agents connected in %.2fs", total, res.ConnectSeconds)
	workers := make([]cycler, cfg.Agents)
	for i := range workers {
		workers[i] = agents[i]
	}
	if err := measureCycles(ctx, cfg, workers, &res, progress); err != nil {
		return res, err
	}
	res.HubRSSKB = procRSS(cfg.HubPID)
	return res, nil
}
