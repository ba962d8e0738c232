#!/usr/bin/env bash
# One device call of a measurement round (run from the repo root on the GPU machine):
#   OUT=out NORMLAB_COMMIT=<sent commit> bash benchmarks/h200_round.sh STAGE
# STAGE: check (GPU checks of the replay/lean paths, then host overhead of the norms),
# pop1 / pop2 (the two halves of the norm population and the peer shapes),
# losses (loss checks, host overhead of the losses, loss options), vocab (the vocabulary
# population), verify (after the defaults changed: the loss checks at the few-row planner, the
# vocabulary population's worst cells and controls, host µs with each host switch on and off,
# the loss options), variants (the norms' wide-row backward: planned kernel, split-row variants
# and peers), planner (after the split-row backward and the pointwise forward: the norm checks,
# the variants at the rule's chunks), options (the loss checks, the loss options with the
# smoothing switch on and off, the population members whose norm plan changed), final (the
# label CE option checks (bf16 softcap: tanh.approx), the rows of one column, the vocabulary
# population for the time left), launch (the norms' launch-bound and wide-row cells against
# launch variants and peers; the host µs of an RMSNorm forward piece by piece), hostpath (the
# norm GPU checks after the host path changed, its host µs piece by piece, the RMSNorm
# forwards' assembly), rules (the replay checks with inference calls, the host µs again, the
# launch-bound cells again, the members the new rules changed), wide (host µs per call; rows
# wider than one block: chunks, warps and one 32768-column block against peers), block (the
# norm GPU checks and the wide population members after rows up to 32768 became one block),
# tiny (the replay checks with the add-norms' inference path; the tiny backwards' grid of row
# tiles and a reduce against the one-program rule; host µs per call, with the floor of a Python
# autograd Function; the launch-bound RMSNorm forward against Liger's, one trait at a time).
# native (the norms' C++ autograd node and C++ inference replay: the replay, CUDA-graph and lean
# checks; host µs per call of every op three times; the norms with the node off and on).
# nativecheck (native's checks, then the norms' host µs with the node off and on, once each).
# tiles (the backward's row tiles bounded by the SMs: the norms checked on the GPU, the population
# members whose plan changed, beside their peers).
# count (label CE's forward counting in its kernel: the vocabulary members below 0.95x; host µs
# of each half of normlab's RMSNorm forward+backward).
# fwdrules (the one-wave forwards, up to a few rows per SM, and fp32 rows: planned against one
# row per program with the parameters early or late, and row tiles, beside torch and Liger).
# addhost (the loss options and the fused add held in one block; normlab's backward timed from
# inside the autograd engine).
# decode (decode batches up to 4 rows per SM and one backward program for two tiles: the norm
# and replay checks, the population members whose forward plan changed, host µs).
# llama (a 1B Llama's training step, eager and compiled: unpatched, normlab.patch, Liger).
# labelafter (label CE's one-hot after the gradient loops, NORMLAB_LOSS_LABEL_AFTER=1: the loss
# checks with it on, the loss options with it off and on, label CE over the vocabulary
# population with it on).
# compileloss (label CE's options checked with the one-hot after the loops, now the default, and
# the compiled-loss checks; the fused loss kernel's sm_90 loops under this Triton, the one-hot
# after and in the loop; the Llama step of llamaprof).
# countrule (label CE over the vocabulary population with the per-SM count bound and the one-hot
# after the loops; the loss options).
# fewrows (label CE with fewer rows than SMs in the fused and chunked forms beside torch.compile;
# the loss options with label smoothing's partial sums).
# fewrule (the vocabulary members whose form the few-rows byte bound changed, beside peers).
# fastexp (the losses' exp as one ex2.approx.ftz, NORMLAB_LOSS_FAST_EXP=1: the loss checks, then
# the loss options' times).
# llamaprof (the 1B Llama step, Hugging Face's and normlab-patched, the loss in the auto and the
# split form, eager and compiled, each with one more step profiled: its top kernels by device time and torch.compile's graph breaks).
# expcap (the losses' one-instruction exp checked on every loss and option; the loss options with
# it off and on, and with the chunked form's 64-register cap at tile 4096 as well as 2048).
# smallreps (the population members whose calls take under 5 µs, with reps raised to about 100
# µs of timed device time each).
# llamaloss (label CE's options, CUDA graphs and torch.compile checked at the new defaults; the 1B
# Llama step compiled: Hugging Face's, normlab's loss alone, normlab's norms and loss).
# defaults (after the reduction buffers' stream rule: the loss checks, CUDA graphs and
# torch.compile, reduce-overhead included, at the new defaults; then the vocabulary population
# with the one-instruction exp on).
# narrow (narrow rows below the block-row layout: norm checks, one row a program against row
# tiles, the population's members); narrowrule (the narrow tiles as they ship: checks, the members
# they tile; then label CE's options in the fused form at 4096 x 32768 with and without a
# 64-register cap at tile 4096); fp32rows (fp32 forwards at model widths against their launch
# variants); launchpath (a one-row LayerNorm forward, normlab's kernel and Liger-Kernel's, each
# through kernel[grid] and normlab's launch path); fp32rule (fp32 rows in LayerNorm's windows
# without the persistent grid, the fused add's backward prefetching dh: the add-norm checks in
# every dtype, the loss options and fused add, the window members of the population);
# aroundcompile (normlab's and Liger's LayerNorm forwards timed before and after torch.compile's);
# fp32check (the norms' GPU checks in fp32, LayerNorm's windows included); pointwise (rows of one
# column: the pointwise forward's block and warps against its peers); gradsig (calls that need a
# gradient replay their checked signature: the replay, lean-launch, graph and norm checks; host µs
# of each half and per call of every op beside torch, torch.compile and Liger); hostrepeat (host µs
# per call of every op beside torch, three times in one call: the host's drift between runs);
# lossreplay (the losses replay their checked signatures: the loss replay, loss, graph, compile
# and lean-launch checks, the GPU-only ticket test; host µs per call of every op, twice);
# unrolled (a replay runs as one generated function: the replay, loss replay, lean-launch, graph,
# compile and norm checks; host µs per call of every op, three times).
# tritonop (the norms as Triton ops under torch.compile: the compiled norms against eager, which
# kernels Inductor launched; the GPU checks); tritonllama (host µs per call of the norms beside
# torch, torch.compile and Liger; the 1B Llama step compiled: Hugging Face's, normlab's loss
# alone, norms and loss); tritonstats (compiled calls without a gradient store no statistics: the
# compiled norms against eager; the stride hint as a product at population members whose rows take
# it; host µs per call beside torch.compile, twice); fusedllama (the 1B Llama step compiled, with
# patch(fused_add=True) beside the plain patch and Hugging Face's, profiled); compiledhost (where a
# compiled norm forward's host time goes, against torch's op); staticlaunch (host µs with and
# without torch's opt-in static launch of user-defined Triton kernels, the compiled norms under
# it against eager; the 1B Llama step eager with the fused-add patch); hostrounds (host µs of every
# op and peer in interleaved rounds; the norms again with the static launch on); lossop (the losses'
# custom op replays inside compiled graphs: every form compiled against eager, each case called
# twice; the GPU checks; host µs in rounds).
# rowalign (the row-stride hint that works, tiles.aligned_stride: the norm checks, then the
# population members whose row strides are even but not a multiple of 16 elements, normlab alone
# with the hint off and on); rowalignpop (those members with the hint, beside their peers);
# rowalignfp (the norm checks in fp32 with the hint; the members among them whose calls take
# under 5 µs, reps raised to about 100 µs of timed device time, as smallreps).
# peerkernel (normlab's one-row forward against Liger-Kernel's kernel at the same grid and warps,
# one difference at a time); flushstate (short forwards timed after the write flush, a read of
# another buffer, an idle GPU, and both); rerun (the population members and peer shapes whose
# forward was below 0.90x or 0.98x, run again beside their peers: how far a ratio moves between
# runs; then Liger's and normlab's short forwards before and after a torch.compile peer ran);
# staticcompile (an eighth of the bf16 population beside torch.compile with dynamic=False,
# compiled per member, as well as the default peer that turns dynamic over the members);
# oddwidths and oddwidths2 (odd widths: both directions' tiles at 1-8 warps, the forward's w/b
# layout, torch, torch.compile per cell); narrowodd and narrowodd2 (rows under 32 columns,
# unaligned and a control: the planned tiles against int64 row offsets and tiles of any rows,
# torch.compile per cell); narrowafter, narrowfinal, narrowone (the same and more narrow cells
# after their rules; narrowone then the staticcompile subset);
# onerow (the members the split forward's bound moves, beside peers; one-row backwards: the
# planned tile against one-row tiles, the fused add's variants; decode batches of rows not vector
# aligned, shifted or not); onerowrule (after those rules: the norm checks, the member 106x18159
# beside peers, the fused add-norms' one-row backwards beside torch.compile); ligerfp16 (the
# forwards at 4096 x 1024 in three dtypes, normlab and Liger-Kernel alone in the population's
# harness, twice, then the planned call and Liger's in norm_launch_variants.py's: which harness's
# Liger time holds); reducefit (the reduce's tile cut to the partial rows,
# NORMLAB_NORM_REDUCE_FIT: the norm checks, then normlab alone off and on at the members whose
# backward reduces a few partial rows); leancompile (compiled calls that read no global but
# their path to the op: the compiled-norm and compiled-loss checks; host µs per call of RMSNorm,
# label CE and reverse KL compiled, beside torch's ops compiled, this tree and the package before
# it; Dynamo's frame and guards alone per compiled call, both packages).
# The package before is made beside this tree before the call: mkdir -p old/34bf16c && git
# archive 34bf16c normlab | tar -x -C old/34bf16c (git ignores old/: name it in the device
# call's carry; the package alone, as the whole old tree would pass the call's 64 MiB).
# pending (leancompile, then reducefit and ligerfp16 while the call's 600 s leave each its step
# limits: each stage's files in one STAGE.tgz).
# devices (on a machine with two GPUs: every op's inputs on cuda:1 while cuda:0 is current,
# against fp64; then the replay checks).
# launchargs (a copy kernel compiled as a Triton op with eight placeholder pointers passed as
# aliases or as None, with Inductor's static launch of user kernels off and on, beside Inductor's
# own kernel; then normlab's compiled forwards profiled with that launch on).
# popall1rest (popall1's members that population_part1_bfef810_h200 did not reach, the norm
# code unchanged since).
# lossclone (the loss kernels' absent tensors launched as None and their gradient addresses
# derived from no helper given the logits or labels: the loss GPU checks; the kernels of one
# compiled loss call, this tree and old/25d7ad4); losscompile (the GPU checks' compile and
# CUDA-graph parts alone); lossclonehost (the compiled losses' host µs per
# call, this tree and old/25d7ad4 in turn, twice).
# h200pop1 / h200pop23 (on an H200 only: the loss options at V = 131072, then the population's
# first third; its second and third thirds: the whole norm population at one commit in two calls).
# h200fwd (on an H200 only: the forwards below 0.90x in population_part1_bfef810_h200 and their
# bf16/fp16/fp32 neighbours at 768 and 1024 columns, one row a program at 1-16 warps and the
# block-row tiles, beside torch, torch.compile and Liger-Kernel).
# normnone (every norm kernel with absent tensors passed as None, 2026-12-07: the norm and
# norm-option checks); normnonegraphs (its compile, lean, replay and CUDA-graph checks);
# normnonehost (host µs of the norms, eager and compiled, this tree and old/4247c27 in turn,
# twice: git archive 4247c27 normlab | tar -x -C old/4247c27, named in the call's carry).
# noneargs (the norm forward with absent tensors passed as None: the norm, compile, lean and
# replay checks, then host µs of the norms, eager and compiled, this tree and the package before
# it in turn, twice; the package before is put in old/05be588 beforehand: git archive 05be588
# normlab | tar -x -C old/05be588, named in the call's carry).
# pastint32 (both norms and every loss form on bf16 inputs past 2**31 elements, 4.3 GB each,
# against fp64 on the rows either side of the boundary: the row offsets' int64 on a GPU).
# h200worst (on an H200 only: h200refresh's members and peer shapes without the notebook, then
# the loss options once with softcap's gradient exp on the FMA pipe off and on).
# lossregs (the fused loss kernel's register caps: the loss options with none, 72 and 64 registers
# a thread at tiles 2048 and 4096, at 131072 and 32768 columns; the norms with the fused add
# inside torch.compile).
# probe (reverse KL with a temperature, on data divided beforehand, and JSD, in each form and tile;
# the fused add's forward at other warps).
# probe2 (a temperature applied at the shift: the chunked form with and without its register caps,
# the loss options; the fused add's forward as a persistent grid of one-row tiles).
# heldcap (a temperature at the shift and the chunked form's held-state cap: every loss and option
# checked in bf16 and fp32, the loss options timed).
# heldcap2 (the held-state cap's two tiles at a ragged and a wider vocabulary).
# labelcap (label CE alone and with its three options, chunked at tiles 2048 and 4096).
# popall1 / popall2 / popall3 (the whole norm population and the peer shapes at one commit, in
# thirds, beside torch, torch.compile and Liger-Kernel, short calls' reps raised as smallreps).
# hostpair (host µs per call of every op beside torch's own op alone, the implementations in turn
# over five rounds: the host-overhead target's pair).
# regress (the population members whose normlab time rose between their merged records and the
# one-commit run: normlab alone at this commit, with w/b apart off, and at earlier commits whose
# package trees were put in old/<commit>/ beforehand: `git archive <commit> normlab
# benchmarks/norm_population.py | tar -x -C old/<commit>`).
# apartfix (LayerNorm's w and b back in x's layout: the members regress found slower, the
# block-row backward at 256 columns with the row hint off, the norm checks for the time left).
# rowbudget (the block-row backward within the register budget of its planned programs per SM,
# NORMLAB_NORM_BLOCK_ROW_BUDGET=1: the norm checks with it on, then block-row members off and on).
# refit (the population members whose plan changed after the one-commit run, beside torch,
# torch.compile and Liger-Kernel: LayerNorm's forward with w and b in x's layout, and the
# block-row backward within its register budget at 65-256 columns).
# widewarps (the forward's launch variants at the fp32 and fp16 members of 768-2048 columns that
# Liger-Kernel beats: the warps of one row a program, row tiles, beside the peers).
# shift (one-block forwards of rows not vector aligned, loaded from the first 16-byte boundary,
# NORMLAB_NORM_SHIFT: the norm and replay checks in bf16 and fp32, the population's unaligned
# members off and on, fp32 rows against their variants); shiftpeers (those members beside torch,
# torch.compile and Liger-Kernel).
# fp32warp (fp32 RMSNorm rows of 768 and 1024 columns at 512-65536 rows: one warp a row against
# the planned tiles and looped rows, beside the peers).
# fp32warprule (after that rule: the fp32 norm checks, the fp32 members at 768 and 1024 columns
# beside their peers).
# shiftparams (the shifted rows' w and b read as vectors from shifted copies,
# NORMLAB_NORM_SHIFTED_PARAMS: the bf16 norm and replay checks, the shifted members off and on).
# bwdshift (the single-pass backward's odd one-row tiles from their first 16-byte boundary,
# NORMLAB_NORM_BWD_SHIFT: bf16 and fp32 norm, option and replay checks, the members off and on);
# bwdwide (one-row backward tiles at odd and aligned widths: prefetch, warps, shifted rows);
# bwdwide2 (shifted rows past 8192 columns at 4-16 warps, 1-2 programs an SM; the members the
# rule shifts beside torch, torch.compile and Liger); bwdaligned (the same variants at the
# population's aligned RMSNorm members of 12288 and 16384 columns); bwdpeers (those members,
# which the shifted backward now takes, beside torch, torch.compile and Liger); bwdblocks (its
# body in two blocks past a power of two, NORMLAB_NORM_BWD_TWO_BLOCKS: bf16 checks, the members
# of 8363-12288 columns with one block and two, then beside their peers); bwdpeershapes (the
# peers' published shapes the shifted backward takes, 512x16384 and 2048x16384, beside them);
# shortprobe (what a call of one or a few programs pays: probe kernels, the decode forwards and
# rows of one column beside Liger's and torch.compile's; then the one-row backward's launch
# variants at 4096-8192 aligned columns, the compile-time width's widest); orderedloads (the
# decode forwards' w, b and x as volatile loads in program order, NORMLAB_ORDERED_LOADS at
# 41c5929, since removed: bf16
# and fp32 norm checks, the population's decode and one-column members off and on, the probe);
# pointwisepeers (rows of one column, w and b loaded after x, beside torch, torch.compile and
# Liger; the one-row forward of odd-width decode batches at 1-16 warps, w/b early or late);
# decodewarps (decode rows spread to at most 8 values a thread, NORMLAB_DECODE_WARPS: norm
# checks, the decode and one-column members off and on); decodepeers (the members the rule,
# narrowed to one row a SM and 2048 columns, changes, beside their peers); onetile (the backward
# of rows that fit one program's tile in one kernel, NORMLAB_NORM_BWD_ONE_TILE at edc5131, since
# removed: its launch variants beside torch, the members it takes off and on, then beside their
# peers).
# losstriton (the losses as Triton ops under torch.compile: every loss, form and option compiled
# against eager, which kernels Inductor launched; the compile, graph and loss checks; host µs per
# call in rounds beside torch and torch.compile; device time of compiled calls at the vocabularies
# of compiledsplit).
# lossloops (the loss kernels' shorter loops: label CE's softcap held as tanh(x / c), its
# gradient's row scalars folded first, the KLs' and JSD's zero-weight factors floored: the loss
# checks with zero-probability columns, each option against its base op and Liger); lossvocab
# (the three losses over the vocabulary population beside torch.compile and Liger). bwdroles
# (a decode batch's backward by role, NORMLAB_NORM_BWD_ROLES=1: the norm checks with it, its
# members off and on); bwdrolespeers (its torch.compile check, its members beside the peers);
# rolesab (timing alone in one call: its members off and on, then beside the peers); rolesrule
# (by role and as two launches, and by role on 1-16 warps, `roles on|off|on wW` of
# norm_launch_variants.py, beside the peers: the one-warp members 12x973 and 14x1022, 5x3149 and
# batches past the rule's 16 rows or 8192 columns; ROLES_PARTS=1 or 2 runs one half); rolesprofile
# (Nsight Compute's full set on the roles launch at 12x973, with torch.compile's kernels there;
# the norms' host µs per call beside torch's); roleswarps (the roles launch on
# config.NORM_BWD_ROLES_WARPS: the norm checks, its members and 5x3149 beside the peers).
# rolesrows (up to 32 rows by role where a column program loads them in one step: the norm
# checks, which hold decode batches, and batches at and past the rule, by role and as two
# launches, beside the peers).
# smoothinf (label smoothing's sum keeps a -inf logit as torch's does, whole tiles with no -inf
# test: the loss checks, -inf logits included, and the options' times).
# worstfwd (the population's members below 0.90x, all forwards, timed twice beside the peers
# as the population was: which misses outlast the run-to-run spread).
# threadstats (label CE's one-lane statistics per thread, the default since 9f01452, for label
# smoothing too since 8093623 but not a softcap in the fused form: the loss checks and label CE's
# options in bf16 and fp32, then the options' times at V = 131072 (chunked) and 32768 (fused)
# with NORMLAB_LOSS_THREAD_STATS=0 and 1).
# smooththreads (at 0f637cd: label smoothing's edge tiles summed within each thread, and its
# calls with statistics per thread too, NORMLAB_LOSS_THREAD_STATS_SMOOTH=1, a switch removed
# since: the loss checks with it on in bf16 and fp32 and label CE's options with it off in bf16;
# then the options' times with statistics per thread off, on but for smoothing, and on for
# smoothing too).
# cevocab (label CE over the vocabulary population beside its peers, statistics per thread the
# default).
# polyexp (softcap's gradient exp on the FMA pipe, NORMLAB_LOSS_POLY_EXP2=1: label CE's option
# checks with it, then the options' times without and with it, twice, interleaved).
# lossprofile (Nsight Compute on the losses at 4096x131072: the DRAM bytes against the bytes
# model, where the warps stall, the MUFU (XU) pipe's load; label smoothing, and softcap without
# and with the FMA-pipe exp).
# fusedgrid (the fused loss kernel's rows in flight: one program a row against persistent grids
# of 1-8 programs an SM, checked bitwise against one a row; then the loss options at 32768).
# fusedstride (the fused form's grid rule: the loss checks, ragged rows one a row against 4 an
# SM, label CE and reverse KL over the vocabulary population with the rule off and on).
# fusedrule (the grid rule as it ships, JSD and loss_mask calls left out: label CE with half its
# labels ignored; the options at 32768 with the rule off and on; 600 and 800 rows, fp32 logits;
# the loss checks, bf16 and fp32, for the time left).
# fusedvocab (label CE and reverse KL over the vocabulary population beside their peers).
# fusedqueue (the fused grid's programs taking rows from a queue against striding them: half the
# labels ignored, 4096 and 1024 rows, bitwise against one a row; the options with the rule off
# and on; the loss checks for the time left). NORMLAB_LOSS_FUSED_QUEUE, the stride's switch,
# was removed after 171c70c: from then on both halves time the queue.
# jsdvocab (forward KL and JSD over the vocabulary population beside torch.compile and Liger's
# JSD). addpop1 / addpop2 (the fused residual add-norms over the population's model widths,
# bf16, beside torch's add then norm, torch.compile of it and Liger's fused add RMSNorm).
# dhlatepop (at d985b52: add_rms_norm's widest model members beside Liger with the fused add's dh
# loaded after the row sums off then on, NORMLAB_NORM_BWD_DH_LATE; level, and removed since: from
# then on both halves time the same kernel).
# h200pops (one call of about 6 minutes for an H200: forward KL and JSD over the vocabulary
# population, the fused add-norms over the model members, then the forwards below 0.90x).
# notebooks (every notebook
# executed on the GPU into docs/h200-notebooks/; its wheels in .whl/nb: `pip download nbclient
# ipykernel plotly ipywidgets --python-version 3.12 --only-binary=:all: --platform
# manylinux_2_17_x86_64 --platform any -d .whl/nb`, less what the machine has).
# Each step has a time limit and writes into $OUT with a log.
set -uo pipefail
OUT=${OUT:-out}
# oneprog (the block-row backward with every row in one program, a rule removed after this run:
# the norm GPU checks with it planned up to 65536 elements; its tiles against the planned grid
# and peers at tiny widths; the population members it planned, off and on); normcheck (the norm
# GPU checks); addorder (the norm GPU checks, then RMSNorm's backward past 8192 columns, fused
# add and plain, beside Liger's fused-add backward; at 467bcc6 also in Liger-Kernel's order, with
# w loaded every row and with contiguous rows: level there because past 8192 columns the plan's
# shifted tile ignored those keywords; removed since); addwidth (RMSNorm's
# backward, fused add and plain, beside Liger's, at widths just under 16384 and at 16384; on
# inputs whose rows lie 64 columns apart; at 361ec48 also with each program's columns rotated by
# quarters or halves of the row: level, and removed since); addtwopass
# (RMSNorm's backward past 12288 columns, fused add and plain, in two passes over column chunks
# and split by rows, beside the planned single pass and Liger's fused add); addprofile (Nsight
# Compute's full set over RMSNorm's backward, fused add and plain, and Liger's fused-add
# backward, at 65536 rows of 12288, 13312 and 14336 columns, then the backward timed at 12288-16384
# columns); addliger (the norm GPU checks, then liger_order_runs: RMSNorm's backward past 12288
# columns shifted, unshifted and in Liger-Kernel's order, and the 16384-column members it plans
# with peers, off and on); addligerpop (liger_order_runs alone); lnwarps (the single pass at
# 4096-8192 columns on 8, 16 and 32 warps and two programs an SM, both norms); addfp32 (the fused
# add's RMSNorm backward with and without its prefetch in fp32 and bf16, beside Liger-Kernel's,
# after the fp32 norm checks with the prefetch's register bound on; the fp32 fused-add members
# with the bound off, with peers, and on); addfp32pop (those members at the bound, now the
# default, with peers; on an H200, the notebooks executed as the notebooks stage does);
# plainfp32 (both norms' plain backward with and without its prefetch, fp32 and bf16, at the
# population's model widths); warmcold (bench.time_warm against time_call on the RMSNorm
# backward, cells in and out of L2; on an H200, notebook 03 executed); onewave (one-row forwards
# whose grid fits about one wave, rows 37-4096 columns wide at 4-60 rows a SM: the parameters
# loaded with x or after the row's sums, at 1-8 warps, beside torch and Liger-Kernel; on an H200,
# notebook 03 executed); onewaverule (one warp for one-row forwards of up to 256 columns and w/b
# with x up to 8 values a thread, NORMLAB_NORM_FWD_ONE_WARP and NORMLAB_NORM_FWD_EARLY_ROWS: the
# norm checks, the population members they change beside their peers, then normlab alone with
# both off; on an H200, notebook 03 executed); onewaveh200 (on an H200 only: those members
# beside their peers, then notebook 03 executed); h200refresh (on an H200 only: the population's
# forwards below 0.90x, the one-row rules' members and the peer shapes below target, both norms
# and directions beside torch, torch.compile and Liger-Kernel, then notebook 03 executed);
# inductorbwd (the row loop software-pipelined in 2-3 stages against the prefetch; torch.compile's
# norm backward, default and max-autotune, beside normlab's at 32768 x 8192, with the Triton
# kernels Inductor generated and the configs it kept; at 22ee0a3 it first timed LayerNorm's dx in
# two FMAs off and on, NORMLAB_NORM_BWD_DX_FOLD, since removed); lnstages (LayerNorm's one-row
# backward tiles of 2048-8192 padded columns pipelined in stages, NORMLAB_NORM_BWD_LN_STAGES: the
# norm checks, the members 1025-8192 columns wide with it off and on, normlab alone); lnstagesab
# (those members off and on alone, within 140 s); loopl2 (RMSNorm's looped row bounded by the L2,
# NORMLAB_NORM_FWD_LOOP_L2: fp32 rows on either side of the bound with it off and on, the one
# block on 8 and 16 warps and Liger-Kernel beside them).
STAGE=${1:?stage: check, pop1, pop2, losses, vocab, verify, variants, planner, options, final, launch, hostpath, rules, wide, block, tiny, tiles, count, fwdrules, addhost, decode, llama, labelafter, llamaprof, compileloss, countrule, fewrows, fewrule, fastexp, expcap, smallreps, llamaloss, defaults, narrow, narrowrule, fp32rows, launchpath, fp32rule, aroundcompile, fp32check, pointwise, gradsig, hostrepeat, lossreplay, unrolled, tritonop, tritonllama, tritonstats, fusedllama, compiledhost, staticlaunch, hostrounds, lossop, compiledsplit, rowalign, rowalignpop, rowalignfp, peerkernel, flushstate, rerun, staticcompile, oddwidths, oddwidths2, narrowodd, narrowodd2, narrowafter, narrowfinal, narrowone, jsd, fusedadd, fusedadd2, lossregs, probe, probe2, heldcap, heldcap2, labelcap, popall1, popall2, popall3, hostpair, regress, apartfix, rowbudget, refit, widewarps, shift, shiftpeers, fp32warp, fp32warprule, shiftparams, bwdshift, bwdwide, bwdwide2, bwdaligned, bwdpeers, bwdblocks, bwdpeershapes, shortprobe, orderedloads, pointwisepeers, decodewarps, decodepeers, onetile, losstriton, compiledforms, compiledforms2, compiledsplitce, hostnow, lossloops, lossvocab, bwdroles, bwdrolespeers, rolesab, rolesrule, rolesprofile, roleswarps, rolesrows, smoothinf, worstfwd, threadstats, smooththreads, cevocab, polyexp, lossprofile, fusedgrid, fusedstride, fusedrule, fusedvocab, fusedqueue, fusedband, fusedfinal, fusedcheck, jsdvocab, addpop1, addpop2, dhlatepop, h200pops, oneprog, normcheck, addorder, addwidth, addtwopass, addprofile, addliger, addligerpop, lnwarps, addfp32, addfp32pop, plainfp32, warmcold, onewave, onewaverule, onewaveh200, h200refresh, inductorbwd, lnstages, lnstagesab, loopl2, onerow, onerowrule, ligerfp16, reducefit, leancompile, pending, pastint32, h200worst, native, nativecheck, devices, launchargs, noneargs, h200fwd, lossclone, losscompile, lossclonehost, popall1rest, normnone, normnonegraphs, normnonehost, h200pop1, h200pop23 or notebooks}
case $STAGE in check | pop1 | pop2 | losses | vocab | verify | variants | planner | options | final | launch | hostpath | rules | wide | block | tiny | tiles | count | fwdrules | addhost | decode | llama | labelafter | llamaprof | compileloss | countrule | fewrows | fewrule | fastexp | expcap | smallreps | llamaloss | defaults | narrow | narrowrule | fp32rows | launchpath | fp32rule | aroundcompile | fp32check | pointwise | gradsig | hostrepeat | lossreplay | unrolled | tritonop | tritonllama | tritonstats | fusedllama | compiledhost | staticlaunch | hostrounds | lossop | compiledsplit | rowalign | rowalignpop | rowalignfp | peerkernel | flushstate | rerun | staticcompile | oddwidths | oddwidths2 | narrowodd | narrowodd2 | narrowafter | narrowfinal | narrowone | jsd | fusedadd | fusedadd2 | lossregs | probe | probe2 | heldcap | heldcap2 | labelcap | popall1 | popall2 | popall3 | hostpair | regress | apartfix | rowbudget | refit | widewarps | shift | shiftpeers | fp32warp | fp32warprule | shiftparams | bwdshift | bwdwide | bwdwide2 | bwdaligned | bwdpeers | bwdblocks | bwdpeershapes | shortprobe | orderedloads | pointwisepeers | decodewarps | decodepeers | onetile | losstriton | compiledforms | compiledforms2 | compiledsplitce | hostnow | lossloops | lossvocab | bwdroles | bwdrolespeers | rolesab | rolesrule | rolesprofile | roleswarps | rolesrows | smoothinf | worstfwd | threadstats | smooththreads | cevocab | polyexp | lossprofile | fusedgrid | fusedstride | fusedrule | fusedvocab | fusedqueue | fusedband | fusedfinal | fusedcheck | jsdvocab | addpop1 | addpop2 | dhlatepop | h200pops | oneprog | normcheck | addorder | addwidth | addtwopass | addprofile | addliger | addligerpop | lnwarps | addfp32 | addfp32pop | plainfp32 | warmcold | onewave | onewaverule | onewaveh200 | h200refresh | inductorbwd | lnstages | lnstagesab | loopl2 | onerow | onerowrule | ligerfp16 | reducefit | leancompile | pending | pastint32 | h200worst | native | nativecheck | devices | launchargs | noneargs | h200fwd | lossclone | losscompile | lossclonehost | popall1rest | normnone | normnonegraphs | normnonehost | h200pop1 | h200pop23 | notebooks) ;; *) echo "unknown stage $STAGE" >&2; exit 2 ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: steps run from other trees too
export PYTHONUNBUFFERED=1
if ls .whl/*.whl > /dev/null 2>&1; then  # Liger-Kernel and friends, carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
fi
# The H200 population's forwards below 0.90x (normlab/data/nvidia-h200-2026-12-03-population).
WORST_FWD=13x448,106x18159,1655x400,8x2048,783x120,8x3584,4096x1024,5265x1
# tiny widths whose padded rows fit 8192-65536 elements (the one-program backward's range)
ONE_PROGRAM_RMS=rms_norm:5265x1,rms_norm:20000x1,rms_norm:50000x1,rms_norm:1184x4,rms_norm:3000x4,rms_norm:14000x4,rms_norm:1000x5,rms_norm:6000x5,rms_norm:300x15,rms_norm:3000x15
ONE_PROGRAM_CELLS=$ONE_PROGRAM_RMS,${ONE_PROGRAM_RMS//rms_norm/layer_norm}
# the population's members under 16 columns whose padded rows fit 65536 elements
ONE_PROGRAM_MEMBERS=3946x10,1763x9,53711x1,1031x14,5265x1,1234x4,1184x4
# The population's forwards of decode batches (config.decode_rows) and rows of one column.
ORDERED_CELLS=1x768,1x1024,1x1536,1x2048,1x2560,1x2880,1x3072,1x3584,1x4096,1x5120,1x6144,1x7168,\
1x8192,1x12288,1x16384,1x53991,1x60954,3x29755,5x3149,8x768,8x1024,8x1536,8x2048,8x2560,8x2880,\
8x3072,8x3584,8x4096,8x5120,8x6144,8x7168,8x8192,8x12288,8x16384,10x11415,12x973,13x448,14x1022,\
33x9383,75x3310,106x18159,110x2640,115x577,261x1110,512x768,512x1024,512x1536,512x2048,5265x1,\
53711x1,1000003x1,8000009x1,10000000x1
# The population members whose backward plan changed with the split-row rule (N > 8192, at
# least one row per SM), and the rows of one column (the pointwise forward).
CHANGED_BWD=3366x60028,296x17767,1329x32826,47318x20163,36052x8363,65536x16384,65536x12288,\
106x18159,482x27361,16384x16384,16384x12288,55536x8495,4096x16384,4096x12288,27492x9693,\
2048x16384
CHANGED_N1=8000009x1,1000003x1,5265x1,53711x1,10000000x1
# The launch-bound cells (forward: the parameters loaded early or late), and the population
# members whose plan the partials cap, the wide-row chunks or the aligned-rows rule changed.
SMALL_FWD=rms_norm:fwd:1x768,rms_norm:fwd:8x4096,rms_norm:fwd:14x1022,rms_norm:fwd:261x1110,\
rms_norm:fwd:512x768,rms_norm:fwd:512x1024,rms_norm:fwd:783x120,rms_norm:fwd:4096x1024,\
layer_norm:fwd:4096x768:fp16,layer_norm:fwd:4096x1024
SMALL_BWD=layer_norm:bwd:13x448,rms_norm:bwd:13x448
# The population's members whose rows are not 16-byte aligned and take the one-row forward.
SHIFT_CELLS=1492488x825,189780x1485,263731x1457,80806x4323,58399x5845,55536x8495,36052x8363,\
27492x9693,19335x14487,47318x20163,12182x373,5158x666,3079x2526,1990x2326,1687x1718,627x2479,\
296x17767,482x27361,7526x3956,6062x7412,245086x5924,74711x1906,34292x14486,12x973,14x1022,\
5x3149,10x11415,33x9383,75x3310,115x577,261x1110,1329x32826
# Those the rule shifts (rows of odd width, more than a decode batch).
SHIFT_TAKEN=1492488x825,189780x1485,263731x1457,80806x4323,58399x5845,55536x8495,36052x8363,\
27492x9693,19335x14487,47318x20163,12182x373,627x2479,296x17767,482x27361
# Those the backward's rule shifts (unaligned one-row tiles past 8192 columns, the single pass).
BWD_SHIFT_TAKEN=19335x14487,27492x9693,36052x8363,55536x8495,34292x14486
# Narrow rows (16-256 columns) between the decode rows and the block-row layout: the population's
# members and shapes beside them, forward (row tiles of 2-64 rows against one row a program).
NARROW_CELLS=593x37,783x120,868x136,1686x75,2479x17,2982x26,5596x214,6872x80,9673x23
NARROW_FWD=$(for c in ${NARROW_CELLS//,/ } 2982x26:fp16 300x128 1000x64 3001x200 12000x48 15000x250 4000x100:fp16; do
  printf 'rms_norm:fwd:%s,layer_norm:fwd:%s,' "$c" "$c"; done)
NARROW_FWD=${NARROW_FWD%,}
NARROW_TILED=1686x75,2479x17,2982x26,5596x214,6872x80,9673x23  # the members the rule tiles
FP32_FWD=$(for n in 768 1024 2048 2560 3584 7168 8192; do
  printf 'rms_norm:fwd:4096x%s:fp32,layer_norm:fwd:4096x%s:fp32,' "$n" "$n"; done)
FP32_FWD=${FP32_FWD%,}
POINTWISE_FWD=$(for c in 5265x1 53711x1 100003x1 1000003x1; do  # rows of one column
  printf 'rms_norm:fwd:%s,layer_norm:fwd:%s,' "$c" "$c"; done)
POINTWISE_FWD=${POINTWISE_FWD%,}
RERUN_CELLS=4096x1024,5265x1,53711x1,14x1022,512x2880,512x3072,4096x768,783x120,8192x1024,\
4096x4096,4096x2560
# The population's members in LayerNorm's persistent windows (4096 rows, 768-8192 columns).
FP32_WINDOWS=4096x768,4096x1024,4096x1536,4096x2048,4096x5120,4096x6144,4096x7168,4096x8192
WIDE_FWD=rms_norm:fwd:47318x20163,layer_norm:fwd:47318x20163,rms_norm:fwd:1329x32826,\
layer_norm:fwd:1329x32826,rms_norm:fwd:296x17767,rms_norm:fwd:482x27361
TINY_BWD=layer_norm:bwd:13x448,rms_norm:bwd:13x448,layer_norm:bwd:14x1022,\
rms_norm:bwd:14x1022,layer_norm:bwd:12x973,rms_norm:bwd:12x973
TILE_CELLS=8x768,8x1024,12x973,13x448,14x1022,115x577,593x37,783x120,868x136,1686x75
CE_FEW_ROWS=95x4723,4x4311,13x4854,73x9928,1x13474,2x3111,20x2543,2x1851,63x19320,1x50257
FEW_RULE_CE=4x4311,13x4854,41x10926,73x9928,95x4723
FEW_RULE_DIST=2x2320,2x3111,2x3395,20x2543,20x2969
CE_FWD_CELLS=383x1446,95x4723,655x3980,13x4854,4x4311,73x9928,512x50257,251x33166,684x8463,\
181x45280,63x19320,20x2543,71x1297,201x16772,25x1223,41x10926,2x3111,20x2969,172x12443,2x3395,\
9x1147,26x1452,100x1049
FWD_WAVE=rms_norm:fwd:264x1024,rms_norm:fwd:512x768,rms_norm:fwd:512x1024,rms_norm:fwd:512x2048,\
rms_norm:fwd:512x4096,rms_norm:fwd:512x8192,rms_norm:fwd:1024x1024,rms_norm:fwd:2048x1024,\
rms_norm:fwd:261x1110,rms_norm:fwd:400x2880,layer_norm:fwd:512x768,layer_norm:fwd:512x1024,\
layer_norm:fwd:512x2048,layer_norm:fwd:512x4096,layer_norm:fwd:1024x1024,layer_norm:fwd:261x1110,\
layer_norm:fwd:4096x768:fp32,rms_norm:fwd:4096x768:fp32,layer_norm:fwd:4096x1024:fp32
DECODE_CELLS=261x1110,296x17767,482x27361,512x768,512x1024,512x1536,512x2048,512x2560,512x2880,\
512x3072,512x3584,512x4096,512x5120,512x6144,512x7168,512x8192,512x12288,512x16384
RULE_CELLS=3366x60028,296x17767,1329x32826,47318x20163,482x27361,1990x2326,512x1536,512x2048,\
512x1024,512x2880,512x768,13x448,14x1022,12x973,261x1110,593x37,783x120,868x136,4096x768,\
4096x1024,4096x1536,4096x2048,7526x3956
# The population members whose calls take under 5 µs (normlab or its best peer, any op,
# direction or dtype, in the shipped population at 2026-12-01).
SMALL_CELLS=1x768,1x1024,1x1536,1x2048,1x2560,1x2880,1x3072,1x3584,1x4096,1x5120,1x6144,1x7168,\
1x8192,1x12288,1x16384,1x53991,1x60954,3x29755,5x3149,8x768,8x1024,8x1536,8x2048,8x2560,8x2880,\
8x3072,8x3584,8x4096,8x5120,8x6144,8x7168,8x8192,8x12288,8x16384,10x11415,12x973,13x448,14x1022,\
33x9383,75x3310,110x2640,115x577,261x1110,512x768,512x1024,512x1536,512x2048,512x2560,512x2880,\
512x3072,512x3584,512x4096,512x5120,512x6144,512x8192,593x37,627x2479,783x120,868x136,1031x14,\
1184x4,1234x4,1655x400,1686x75,1763x9,2479x17,2982x26,3946x10,4096x768,5265x1,10428x5,53711x1,\
128421x2,1000003x1,1000003x2
# Population members whose row strides are even but not a multiple of 16 elements (the hint's).
ROW_ALIGN_CELLS=1184x4,1234x4,14x1022,1031x14,3946x10,1x60954,2982x26,783x120,868x136,75x3310,128421x2,261x1110,5596x214,52873x28,77352x24,1000003x2,250431x10,1687x1718,5158x666,10885x408,188442x24,1990x2326,3079x2526,1000003x8,8000009x2,15080x1464,1000003x24,7526x3956,10000000x4,1329x32826,6062x7412,10000000x6,8000009x8,307891x220,1000003x100,74711x1906,8000009x24,1000003x200,3366x60028,10000000x36,34292x14486,1000003x500,10000000x62,10000000x70,8000009x100,245086x5924,8000009x200,8000009x500
# Those whose calls took under 5 µs at 9282889 (normlab or a peer, any op, direction or dtype).
ROW_ALIGN_SMALL_CELLS=1x60954,14x1022,75x3310,261x1110,783x120,868x136,1031x14,1184x4,1234x4,2982x26,3946x10,5596x214,52873x28,77352x24,128421x2,1000003x2
# A timeout around this script stops the step it is running too: a step left running would share
# the GPU with the next (2026-12-08: an outer timeout left a population third running beside the
# next, and the records of the overlap were slowed up to 16x).
STEP_PID=
trap '[ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2> /dev/null; exit 143' TERM INT
step() {  # step NAME SECONDS CMD...: run with a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2 rc
  shift 2
  echo "== $name (limit ${limit}s): $*"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"
  rc=$?
  STEP_PID=
  echo "== $name: exit $rc after ${SECONDS}s"
  tail -n 25 "$OUT/$name.log"
}
jsd_vocab() {  # jsd_vocab LIMIT MAX_SECONDS: forward KL and JSD over the vocabulary population
  step vocab_jsdvocab "$1" python3 benchmarks/vocab_population.py --ops forward_kl,jsd \
    --out "$OUT/vocab_jsdvocab.jsonl" --reps 6 --max-seconds "$2"
}
add_pop() {  # add_pop SHARD LIMIT: the fused add-norms over half the model members, with peers
  step "population_addpop_$1" "$2" python3 benchmarks/norm_population.py \
    --ops add_rms_norm,add_layer_norm --out "$OUT/population_addpop_$1.jsonl" --reps 4 \
    --timed-us 100 --families model --dtypes bf16 --impls normlab,torch,compile,liger \
    --shard "$1/2"
}
# The decode members whose backward config.bwd_roles takes (one-row tiles, 3-64 rows).
ROLES_MEMBERS=8x768,8x1024,8x1536,8x2048,8x2560,8x2880,8x3072,8x3584,8x4096,8x5120,8x6144,8x7168
ROLES_MEMBERS=$ROLES_MEMBERS,8x8192,12x973,13x448,14x1022
off_on() {  # off_on VAR NAME SECONDS CELLS: normlab alone over CELLS with VAR=0, then VAR=1
  local on
  for on in 0 1; do
    step "${2}_$on" "$3" env "$1=$on" python3 benchmarks/norm_population.py \
      --out "$OUT/${2}_$on.jsonl" --reps 4 --timed-us 100 --impls normlab --cells "$4"
  done
}
stride_options() {  # stride_options NAME: the options at 4096x32768, the fused grid off then on
  local on
  for on in 0 1; do
    step "loss_options_V32768_${1}_stride$on" 75 env NORMLAB_LOSS_FUSED_STRIDE=$on python3 \
      benchmarks/loss_options.py --V 32768 --out "$OUT/loss_options_V32768_${1}_stride$on.jsonl" \
      --reps 10 --max-seconds 55
  done
}
options_off_on() {  # options_off_on VAR NAME: the loss options with VAR=0, then 1, twice
  local run on
  for run in 1 2; do
    for on in 0 1; do
      step "loss_options_${2}${on}_$run" 90 env "$1=$on" python3 benchmarks/loss_options.py \
        --out "$OUT/loss_options_${2}${on}_$run.jsonl" --reps 10 --max-seconds 50
    done
  done
}
check_norms() {  # every norm strategy x layout against fp64 at gpu_check's shapes, bf16
  step gpu_check_norms 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
    --quick --only norms
}
static_compile_subset() {  # an eighth of the bf16 population beside torch.compile per member
  step population_static_compile 480 python3 benchmarks/norm_population.py --reps 4 \
    --timed-us 100 --dtypes bf16 --shard 1/8 --impls normlab,torch,compile,liger,compile-static \
    --out "$OUT/population_static_compile.jsonl"
}
notebooks_on() {  # notebooks_on LIMIT [NOTEBOOK...]: the notebooks (default all) executed, their
  # wheels from .whl/nb; the copies and summary.json travel as $OUT/notebooks.tgz (one file)
  local limit=$1
  shift
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/nbsite .whl/nb/*.whl && export PYTHONPATH=${PYTHONPATH:-$PWD}:/tmp/nbsite
  timeout "$limit" python3 scripts/execute_notebooks.py "$@" --out "$OUT/notebooks"
  tar -czf "$OUT/notebooks.tgz" -C "$OUT" notebooks && rm -r "$OUT/notebooks"
}
in_old() {  # in_old COMMIT CMD...: CMD from old/COMMIT (git archive of that package, carried)
  local c=$1
  shift
  (cd "old/$c" && PYTHONPATH=$PWD:/tmp/site NORMLAB_COMMIT=$c "$@")
}
tree_overhead() {  # tree_overhead NAME OPS IMPLS: host µs per call of the current directory's tree
  timeout 100 python3 -m normlab bench --overhead --impl "$3" --op "$2" \
    --out "$OUT/overhead_$1.json" --no-progress > "$OUT/overhead_$1.log" 2>&1
  echo "== overhead_$1: exit $? after ${SECONDS}s"
  head -n 12 "$OUT/overhead_$1.log"
}
on_h200() {  # on_h200: is this card an H200?
  nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200
}
# Population members 1025-8192 columns wide (LayerNorm's staged row loop), and the peers'.
LN_STAGED_CELLS=1x4096,75x3310,110x2640,512x2048,512x4096,512x8192,627x2479,1687x1718,1990x2326,\
3079x2526,4096x1536,4096x2048,4096x2880,4096x4096,4096x5120,4096x8192,6062x7412,7526x3956,\
15080x1464,16384x2048,16384x3072,16384x4096,16384x6144,16384x8192,58399x5845,65536x1536,\
65536x2560,65536x4096,65536x7168,65536x8192,74711x1906,80806x4323,189780x1485,32768x8192
ln_stages_ab() {  # ln_stages_ab LIMIT TIMED_US: LN_STAGED_CELLS with the staged loop off, then on
  local run
  for run in 0 1; do
    NORMLAB_NORM_BWD_LN_STAGES=$run step "population_lnstages_$run" "$1" python3 \
      benchmarks/norm_population.py --ops layer_norm --impls normlab --reps 4 --timed-us "$2" \
      --families random,model,narrow,peers --cells "$LN_STAGED_CELLS" \
      --out "$OUT/population_lnstages_$run.jsonl"
  done
}
# fp32 RMSNorm rows either side of the looped row's L2 bound (400/401 rows at 16384 columns on
# 132 SMs and 50 MiB, 800/801 at 8192 in the one-wave grid), fp32 12288 and bf16 16384 inside it.
LOOP_L2_CELLS=rms_norm:fwd:400x16384:fp32,rms_norm:fwd:401x16384:fp32,\
rms_norm:fwd:1024x16384:fp32,rms_norm:fwd:4096x16384:fp32,rms_norm:fwd:16384x16384:fp32,\
rms_norm:fwd:800x8192:fp32,rms_norm:fwd:1000x8192:fp32,rms_norm:fwd:4096x12288:fp32,\
rms_norm:fwd:4096x16384
# The population members whose one-row forward the one-warp and early-parameter rules change.
ONE_WAVE_MEMBERS=593x37,783x120,868x136,1655x400,10885x408,12182x373
refresh_cells() {  # refresh_cells NAME LIMIT: the H200 population's worst members, peer shapes
  step "$1" "$2" python3 benchmarks/norm_population.py \
    --ops rms_norm,layer_norm --families random,model,narrow,peers \
    --impls normlab,torch,compile,liger --reps 4 --timed-us 100 \
    --cells "$WORST_FWD,$ONE_WAVE_MEMBERS,4096x4096,8192x1024,32768x8192" --out "$OUT/$1.jsonl"
}
one_wave_peers() {  # one_wave_peers LIMIT: those members beside torch, torch.compile and Liger
  step population_onewave_peers "$1" python3 benchmarks/norm_population.py \
    --ops rms_norm,layer_norm --families random --impls normlab,torch,compile,liger --reps 4 \
    --timed-us 100 --cells "$ONE_WAVE_MEMBERS" --out "$OUT/population_onewave_peers.jsonl"
}
bwd_variants() {  # bwd_variants NAME...: norm_fused_add.py's planned backwards, Liger's fused
  # add's, and each NAME for the fused add and the plain norm, comma-joined for --bwd
  local v="fused add planned,plain planned,liger fused add backward" who name
  for who in "fused add" plain; do
    for name in "$@"; do v="$v,$who $name"; done
  done
  echo "$v"
}
liger_order_runs() {  # the single pass's variants past 12288 columns, then the members
  # Liger-Kernel's order plans, with peers, and with it off
  v=$(bwd_variants shifted "unshifted 8 warps" "unshifted 16 warps" "Liger order 8 warps" \
    "Liger order 16 warps")
  step norm_fused_liger 240 python3 benchmarks/norm_fused_add.py --ops rms_norm --reps 10 \
    --bwd "$v" --out "$OUT/norm_fused_liger.jsonl" --cells \
    65536x12288,65536x12296,65536x12800,65536x14336,65536x16384,16384x16384,4096x16384,512x16384
  wide=512x16384,4096x16384,16384x16384,65536x16384
  for on in 1 0; do
    step "population_liger_$on" 150 env NORMLAB_NORM_BWD_LIGER_ORDER=$on \
      python3 benchmarks/norm_population.py --ops rms_norm --out "$OUT/population_liger_$on.jsonl" \
      --reps 4 --timed-us 100 --families model --impls normlab,torch,compile,liger --cells "$wide"
    step "population_addliger_$on" 150 env NORMLAB_NORM_BWD_LIGER_ORDER=$on \
      python3 benchmarks/norm_population.py --ops add_rms_norm --dtypes bf16 --reps 4 \
      --out "$OUT/population_addliger_$on.jsonl" --timed-us 100 --families model \
      --impls normlab,torch,compile,liger --cells "$wide"
  done
}
case $STAGE in
  check)
    step gpu_check 250 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check.json" --quick --only replay,lean,graphs,compile,norms,norm_options
    step overhead_norms 100 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch,liger --out "$OUT/overhead_norms.json" --no-progress
    step overhead_norms_no_replay 100 env NORMLAB_REPLAY=0 python3 -m normlab bench --overhead \
      --op rms_norm,layer_norm --impl normlab,torch,compile \
      --out "$OUT/overhead_norms_no_replay.json" --no-progress
    step host_profile 40 python3 benchmarks/host_profile.py --op rms_norm \
      --direction fwd+bwd --top 30
    ;;
  pop1 | pop2)
    shard=${STAGE#pop}
    step "population_$shard" 530 python3 benchmarks/norm_population.py \
      --out "$OUT/population_$shard.jsonl" --reps 4 --families random,model,narrow,peers \
      --shard "$shard/2"
    ;;
  losses)
    step gpu_check_losses 120 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_losses.json" \
      --quick --only losses,loss_options
    step gpu_check_torch_reduce 90 env NORMLAB_LOSS_REDUCE=0 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_torch_reduce.json" --quick --only losses,graphs
    step loss_graph_ticket 60 python3 -m pytest -q -p no:cacheprovider tests/test_loss_host.py \
      -k cuda_graph
    step overhead_losses 100 python3 -m normlab bench --overhead \
      --op cross_entropy,reverse_kl,soft_cross_entropy --out "$OUT/overhead_losses.json" \
      --no-progress
    step loss_options 150 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --max-seconds 120
    ;;
  vocab)
    step vocab_population 460 python3 benchmarks/vocab_population.py \
      --out "$OUT/vocab_population.jsonl" --max-seconds 400
    ;;
  variants)
    step norm_bwd_variants 480 python3 benchmarks/norm_bwd_variants.py \
      --out "$OUT/norm_bwd_variants.jsonl" --reps 6
    ;;
  planner)
    step gpu_check_planner 240 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_planner.json" \
      --quick --only replay,lean,graphs,norms,norm_options
    step norm_bwd_variants_rule 240 python3 benchmarks/norm_bwd_variants.py \
      --out "$OUT/norm_bwd_variants_rule.jsonl" --reps 6 --cells "$CHANGED_BWD"
    ;;
  options)
    step gpu_check_options 110 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_options.json" \
      --quick --only losses,loss_options
    for sum in 1 0; do
      step "loss_options_tile_sum$sum" 80 env NORMLAB_LOSS_SMOOTH_TILE_SUM=$sum python3 \
        benchmarks/loss_options.py --out "$OUT/loss_options_tile_sum$sum.jsonl" --reps 10 \
        --max-seconds 60
    done
    step population_changed 230 python3 benchmarks/norm_population.py \
      --out "$OUT/population_changed.jsonl" --reps 4 --families random,model,narrow,peers \
      --cells "$CHANGED_BWD,$CHANGED_N1,1x12288,1x16384,1x53991,1x60954,3x29755,8x12288,8x16384,10x11415,33x9383,512x12288,512x16384,19335x14487,34292x14486"
    ;;
  final)
    step gpu_check_ce_options 60 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_ce_options.json" --quick --only loss_options --loss-options cross_entropy
    step population_one_column 60 python3 benchmarks/norm_population.py \
      --out "$OUT/population_one_column.jsonl" --reps 4 --families random,model,narrow \
      --cells "$CHANGED_N1"
    step vocab_population 330 python3 benchmarks/vocab_population.py \
      --out "$OUT/vocab_population.jsonl" --max-seconds 270
    ;;
  launch)
    step host_breakdown 90 python3 benchmarks/host_breakdown.py --source
    step norm_launch_variants 420 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_launch_variants.jsonl" --reps 6
    ;;
  hostpath)
    step gpu_check_hostpath 260 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_hostpath.json" --quick --only replay,lean,graphs,norms,norm_options
    step host_breakdown 100 python3 benchmarks/host_breakdown.py --calls 5000
    step kernel_asm 40 python3 benchmarks/kernel_asm.py --out "$OUT/asm" --shape 512x768
    step overhead_norms 60 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch --out "$OUT/overhead_norms.json" --no-progress
    ;;
  wide)
    step overhead_norms 60 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch --out "$OUT/overhead_norms.json" --no-progress
    step norm_wide_variants 200 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_wide_variants.jsonl" --reps 4 --peers torch,compile --cells \
      "$WIDE_FWD"
    step population_wide 150 python3 benchmarks/norm_population.py \
      --out "$OUT/population_wide.jsonl" --reps 4 --families random,model,narrow,peers \
      --cells 3366x60028,296x17767,1329x32826,47318x20163,482x27361
    ;;
  block)
    step gpu_check_block 150 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_block.json" --quick --only norms
    step population_block 170 python3 benchmarks/norm_population.py \
      --out "$OUT/population_block.jsonl" --reps 4 --families random,model,narrow,peers \
      --cells 3366x60028,296x17767,1329x32826,47318x20163,482x27361
    ;;
  tiny)
    step gpu_check_replay 90 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_replay.json" --quick --only replay,graphs
    step norm_tiny_variants 200 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_tiny_variants.jsonl" --reps 6 --cells "$TINY_BWD"
    step overhead_norms 60 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch --out "$OUT/overhead_norms.json" --no-progress
    step host_breakdown 60 python3 benchmarks/host_breakdown.py --calls 4000
    step norm_fwd_ablation 90 python3 benchmarks/norm_fwd_ablation.py \
      --out "$OUT/norm_fwd_ablation.jsonl" --reps 8
    ;;
  tiles)
    step gpu_check_tiles 130 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_tiles.json" --quick --only norms
    step population_tiles 330 python3 benchmarks/norm_population.py \
      --out "$OUT/population_tiles.jsonl" --reps 4 --families random,model,narrow \
      --cells "$TILE_CELLS"
    ;;
  count)
    step vocab_ce_fwd 200 python3 benchmarks/vocab_population.py \
      --out "$OUT/vocab_ce_fwd.jsonl" --ops cross_entropy --directions fwd --reps 6 \
      --max-seconds 170 --cells "$CE_FWD_CELLS"
    step host_breakdown 80 python3 benchmarks/host_breakdown.py --calls 4000
    ;;
  fwdrules)
    step norm_fwd_wave 420 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_fwd_wave.jsonl" --reps 6 --peers torch,liger --cells "$FWD_WAVE"
    ;;
  addhost)
    step loss_options 100 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 70
    step host_breakdown 70 python3 benchmarks/host_breakdown.py --calls 2000
    ;;
  decode)
    step gpu_check_decode 130 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_decode.json" --quick --only norms,replay
    step population_decode 260 python3 benchmarks/norm_population.py \
      --out "$OUT/population_decode.jsonl" --reps 4 --families random,model,narrow \
      --cells "$DECODE_CELLS"
    step overhead_norms 60 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch --out "$OUT/overhead_norms.json" --no-progress
    step host_breakdown 70 python3 benchmarks/host_breakdown.py --calls 2000
    ;;
  llama)
    step llama_step 500 python3 benchmarks/llama_step.py --out "$OUT/llama_step.json" \
      --steps 20 --warmup 5
    ;;
  compileloss)
    step gpu_check_ce_options 150 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_ce.json" \
      --quick --only loss_options,compile,graphs --loss-options cross_entropy
    step kernel_loops 60 python3 benchmarks/kernel_loops.py --out "$OUT/kernel_loops.txt"
    step kernel_loops_in_loop 60 python3 benchmarks/kernel_loops.py --one-hot-in-loop \
      --out "$OUT/kernel_loops_in_loop.txt"
    step llama_profile 330 python3 benchmarks/llama_step.py --out "$OUT/llama_profile.json" \
      --variants hf,normlab,normlab_split --steps 10 --warmup 4 --profile 40
    ;;
  fewrows)
    step ce_forms 240 python3 -m normlab bench --no-progress --op cross_entropy \
      --impl normlab,compile --form auto,fused,chunked --shapes "$CE_FEW_ROWS" \
      --direction fwd,fwd+bwd --reps 10 --out "$OUT/ce_forms.jsonl"
    step loss_options 100 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 60
    ;;
  fewrule)
    step vocab_few_ce 150 python3 benchmarks/vocab_population.py --out "$OUT/vocab_few_ce.jsonl" \
      --ops cross_entropy --reps 6 --max-seconds 120 --cells "$FEW_RULE_CE"
    step vocab_few_dist 150 python3 benchmarks/vocab_population.py \
      --out "$OUT/vocab_few_dist.jsonl" --ops reverse_kl,soft_cross_entropy --reps 6 \
      --max-seconds 120 --cells "$FEW_RULE_DIST"
    ;;
  fastexp)
    step gpu_check_fast_exp 75 env NORMLAB_LOSS_FAST_EXP=1 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fast_exp.json" --quick --only losses
    step loss_options_fast_exp 100 env NORMLAB_LOSS_FAST_EXP=1 python3 benchmarks/loss_options.py \
      --out "$OUT/loss_options_fast_exp.jsonl" --reps 6 --max-seconds 40
    ;;
  expcap)
    step gpu_check_fast_exp 230 env NORMLAB_LOSS_FAST_EXP=1 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fast_exp.json" --quick --only losses,loss_options
    for variant in "0 2048:64" "1 2048:64" "1 2048:64,4096:64" "0 2048:64,4096:64"; do
      set -- $variant
      step "loss_options_exp$1_cap${2//[:,]/_}" 75 env NORMLAB_LOSS_FAST_EXP=$1 python3 \
        benchmarks/loss_options.py --out "$OUT/loss_options_exp$1_cap${2//[:,]/_}.jsonl" \
        --reps 6 --max-seconds 50 --chunked-maxnreg "$2"
    done
    ;;
  smallreps)
    step population_small 570 python3 benchmarks/norm_population.py \
      --out "$OUT/population_small.jsonl" --reps 4 --timed-us 100 --families random,model,narrow \
      --cells "$SMALL_CELLS"
    ;;
  llamaloss)
    step gpu_check_defaults 100 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_defaults.json" \
      --quick --only loss_options,graphs,compile --loss-options cross_entropy
    step llama_loss 400 python3 benchmarks/llama_step.py --out "$OUT/llama_loss.json" \
      --variants hf,normlab_loss,normlab --modes compile --steps 12 --warmup 4
    ;;
  defaults)
    step gpu_check_defaults 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_defaults.json" \
      --quick --only losses,graphs,compile,replay
    step vocab_population 340 python3 benchmarks/vocab_population.py \
      --out "$OUT/vocab_population.jsonl" --max-seconds 290
    ;;
  narrow)
    step gpu_check_narrow 150 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_narrow.json" \
      --quick --only norms
    step norm_narrow_variants 240 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_narrow_variants.jsonl" --reps 20 --cells "$NARROW_FWD"
    step population_narrow 200 python3 benchmarks/norm_population.py \
      --out "$OUT/population_narrow.jsonl" --reps 4 --timed-us 100 --families random,model,narrow \
      --cells "$NARROW_CELLS"
    ;;
  narrowrule)  # the narrow forward's tile rule as it ships; then the fused form's register cap
    step gpu_check_narrowrule 120 python3 benchmarks/gpu_check.py \
      --out /tmp/gpu_check_narrowrule.json --quick --only norms  # the log has every line
    step population_narrowrule 150 python3 benchmarks/norm_population.py \
      --out "$OUT/population_narrowrule.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --cells "$NARROW_TILED"
    for caps in none 4096:64; do
      step "loss_options_v32768_fused_${caps//:/_}" 100 python3 benchmarks/loss_options.py \
        --out "$OUT/loss_options_v32768_fused_${caps//:/_}.jsonl" --V 32768 --reps 10 \
        --max-seconds 70 --fused-maxnreg "$caps"
    done
    ;;
  fp32rows)  # fp32 forwards at model widths (0.88-0.97x Liger): warps keyed by elements, not bytes
    step norm_fp32_variants 300 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_fp32_variants.jsonl" --reps 10 --cells "$FP32_FWD"
    ;;
  launchpath)  # a one-row LayerNorm forward against Liger's kernel, each through both launch paths
    step norm_fwd_launch_path 150 python3 benchmarks/norm_fwd_launch_path.py \
      --out "$OUT/norm_fwd_launch_path.jsonl" --reps 10
    ;;
  aroundcompile)  # normlab's and Liger's LayerNorm forwards before and after torch.compile's
    step norm_fwd_around_compile 200 python3 benchmarks/norm_fwd_launch_path.py \
      --out "$OUT/norm_fwd_around_compile.jsonl" --reps 10 --around-compile \
      --cells 4096x1024:bf16,4096x1024:fp32,8192x1024:bf16,4096x768:bf16
    ;;
  gradsig)  # calls that need a gradient replay their checked signature's forward and backward
    step gpu_check_gradsig 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_gradsig.json" \
      --quick --only replay,lean,graphs,norms,norm_options
    step host_breakdown 80 python3 benchmarks/host_breakdown.py --calls 4000
    step overhead_norms 150 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --out "$OUT/overhead_norms.json" --no-progress
    step overhead_losses 150 python3 -m normlab bench --overhead \
      --op cross_entropy,reverse_kl,soft_cross_entropy --out "$OUT/overhead_losses.json" \
      --no-progress
    ;;
  hostrepeat)  # host µs per call, normlab and torch, three runs in one device call
    for run in 1 2 3; do
      step "overhead_repeat$run" 150 python3 -m normlab bench --overhead --impl normlab,torch \
        --out "$OUT/overhead_repeat$run.json" --no-progress
    done
    ;;
  lossreplay)  # the losses replay their checked signature's forward and the backward's rescale
    step gpu_check_lossreplay 300 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_lossreplay.json" --quick \
      --only loss_replay,replay,losses,loss_options,graphs,compile,lean
    step loss_graph_ticket 90 python3 -m pytest -q -p no:cacheprovider tests/test_loss_host.py \
      -k cuda_graph
    for run in 1 2; do
      step "overhead_lossreplay$run" 150 python3 -m normlab bench --overhead --impl normlab,torch \
        --out "$OUT/overhead_lossreplay$run.json" --no-progress
    done
    ;;
  unrolled)  # each replay unrolled into one generated function
    step gpu_check_unrolled 260 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_unrolled.json" --quick \
      --only replay,loss_replay,lean,graphs,compile,norms
    for run in 1 2 3; do
      step "overhead_unrolled$run" 100 python3 -m normlab bench --overhead --impl normlab,torch \
        --out "$OUT/overhead_unrolled$run.json" --no-progress
    done
    ;;
  tritonop)  # the norms as Triton ops: Inductor launches their kernels where shapes are static
    step compile_check_norms 150 python3 benchmarks/compile_check.py --norms
    step gpu_check_tritonop 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_tritonop.json" --quick --only compile,graphs,replay,norms
    ;;
  tritonllama)  # host µs with torch.compile; the 1B Llama step compiled
    step overhead_tritonop1 150 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch,compile,normlab+compile,liger --out "$OUT/overhead_tritonop1.json" \
      --no-progress
    step llama_tritonop 420 python3 benchmarks/llama_step.py --out "$OUT/llama_tritonop.json" \
      --variants hf,normlab_loss,normlab --modes compile --steps 12 --warmup 4
    ;;
  tritonstats)  # compiled calls without a gradient store no statistics
    step compile_check_stats 150 python3 benchmarks/compile_check.py --norms
    # the stride hint as a product (aligned_stride): population members whose rows take it
    step aligned_stride 90 python3 -m normlab bench --no-progress --op rms_norm,layer_norm \
      --impl normlab,torch --shapes 15080x1464,10885x408 --direction fwd,bwd --reps 10 \
      --out "$OUT/aligned_stride.jsonl"
    for run in 1 2; do
      step "overhead_tritonstats$run" 120 python3 -m normlab bench --overhead \
        --op rms_norm,layer_norm --impl normlab,torch,compile,normlab+compile,liger \
        --out "$OUT/overhead_tritonstats$run.json" --no-progress
    done
    ;;
  fusedllama)  # the decoder layers' mid-block residual add inside add_rms_norm, compiled
    step llama_fused 560 python3 benchmarks/llama_step.py --out "$OUT/llama_fused.json" \
      --variants hf,normlab,normlab_fused --modes compile --steps 12 --warmup 4 --profile 30
    ;;
  compiledhost)  # a compiled norm forward's host time: cProfile and Inductor's wrapper code
    step compiled_host_profile 150 python3 benchmarks/compiled_host_profile.py
    ;;
  staticlaunch)  # Inductor's static launcher for normlab's kernels (torch's opt-in config)
    for launch in 0 1; do
      TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=$launch step \
        "overhead_static$launch" 120 python3 -m normlab bench --overhead --op rms_norm,layer_norm \
        --impl normlab+compile,compile,torch --out "$OUT/overhead_static$launch.json" --no-progress
    done
    TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1 step compile_check_static 150 \
      python3 benchmarks/compile_check.py --norms
    step llama_fused_eager 300 python3 benchmarks/llama_step.py \
      --out "$OUT/llama_fused_eager.json" --variants hf,normlab,normlab_fused --modes eager \
      --steps 12 --warmup 4
    ;;
  hostrounds)  # host µs per call, the implementations in turn over five rounds
    step overhead_rounds 420 python3 -m normlab bench --overhead \
      --impl normlab,torch,compile,normlab+compile,liger --out "$OUT/overhead_rounds.json" \
      --no-progress
    TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1 step overhead_rounds_static 150 \
      python3 -m normlab bench --overhead --op rms_norm,layer_norm \
      --impl normlab,torch,compile,normlab+compile --out "$OUT/overhead_rounds_static.json" \
      --no-progress
    ;;
  lossop)  # the losses' custom op replays a signature's first call inside compiled graphs
    step compile_check_lossop 200 python3 benchmarks/compile_check.py
    step gpu_check_lossop 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_lossop.json" \
      --quick --only compile,graphs,replay,losses
    step overhead_lossop 200 python3 -m normlab bench --overhead \
      --op cross_entropy,reverse_kl,soft_cross_entropy --impl normlab,torch,compile,normlab+compile \
      --out "$OUT/overhead_lossop.json" --no-progress
    ;;
  rowalign)  # the row-stride hint: checks, then the members it reaches with it off and on
    step gpu_check_rowalign 240 python3 benchmarks/gpu_check.py --quick \
      --out "$OUT/gpu_check_rowalign.json" --only norms,norm_options
    step rowalign_off 150 env NORMLAB_NORM_ROW_ALIGN=0 python3 benchmarks/norm_population.py \
      --impls normlab --reps 4 --cells "$ROW_ALIGN_CELLS" --out "$OUT/rowalign_off.jsonl"
    step rowalign_on 150 python3 benchmarks/norm_population.py \
      --impls normlab --reps 4 --cells "$ROW_ALIGN_CELLS" --out "$OUT/rowalign_on.jsonl"
    ;;
  rowalignfp)  # the row-stride hint: the norm checks in fp32
    step gpu_check_rowalign_fp 500 python3 benchmarks/gpu_check.py --dtypes fp32 \
      --out "$OUT/gpu_check_rowalign_fp.json" --only norms,norm_options
    step population_rowalign_small 300 python3 benchmarks/norm_population.py --reps 4 \
      --timed-us 100 --cells "$ROW_ALIGN_SMALL_CELLS" --out "$OUT/population_rowalign_small.jsonl"
    ;;
  rowalignpop)  # the members the hint reaches, with it, beside their peers
    step population_rowalign 540 python3 benchmarks/norm_population.py --reps 4 \
      --cells "$ROW_ALIGN_CELLS" --out "$OUT/population_rowalign.jsonl"
    ;;
  compiledsplit)  # a compiled loss with a gradient takes the split form (ENTROPY_COMPILED_GRAD_FORM)
    step compile_check_split 240 python3 benchmarks/compile_check.py --losses
    step compiled_loss_llama 200 python3 -m normlab bench --no-progress --op cross_entropy \
      --shapes 8192x128256 --direction fwd+bwd --impl compile,normlab,normlab+compile \
      --form auto,chunked --reps 20 --out "$OUT/compiled_loss_llama.jsonl"
    step compiled_loss 420 python3 -m normlab bench --no-progress --op cross_entropy,reverse_kl \
      --shapes 256x131072,4096x32768,4096x131072 --direction fwd+bwd \
      --impl compile,normlab,normlab+compile --form auto,fused,chunked --reps 20 \
      --out "$OUT/compiled_loss.jsonl"
    step compiled_loss_rows 300 python3 -m normlab bench --no-progress \
      --op cross_entropy,reverse_kl --shapes 132x131072,528x131072,1056x131072,528x32768 \
      --direction fwd+bwd --impl normlab,normlab+compile --form split,fused,chunked --reps 20 \
      --out "$OUT/compiled_loss_rows.jsonl"
    step llama_chunked_vs_split 560 python3 benchmarks/llama_step.py \
      --out "$OUT/llama_chunked_vs_split.json" --variants hf,normlab,normlab_chunked \
      --modes compile --steps 12 --warmup 4 --profile 30
    ;;
  pointwise)  # rows of one column: the pointwise forward's block and warps against peers
    step norm_pointwise_variants 150 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_pointwise_variants.jsonl" --reps 20 --cells "$POINTWISE_FWD"
    ;;
  fp32check)  # the norms on the GPU in fp32 (LayerNorm's windows included) against fp64
    step gpu_check_fp32 280 python3 benchmarks/gpu_check.py --out /tmp/gpu_check_fp32.json \
      --only norms --dtypes fp32  # the log has every line
    ;;
  fp32rule)  # fp32 rows take the windows' tiles without the grid; the fused add's dh prefetched
    step gpu_check_fp32rule 120 python3 benchmarks/gpu_check.py \
      --out /tmp/gpu_check_fp32rule.json --only norm_options  # the log has every line
    step loss_options 100 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 60
    step population_fp32rule 240 python3 benchmarks/norm_population.py \
      --out "$OUT/population_fp32rule.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow,peers --cells "$FP32_WINDOWS"
    ;;
  countrule)
    step vocab_count 200 python3 benchmarks/vocab_population.py --out "$OUT/vocab_count.jsonl" \
      --ops cross_entropy --reps 6 --max-seconds 170
    step loss_options 80 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 60
    ;;
  llamaprof)
    step llama_profile 420 python3 benchmarks/llama_step.py --out "$OUT/llama_profile.json" \
      --variants hf,normlab,normlab_split --steps 10 --warmup 4 --profile 40
    ;;
  labelafter)
    step gpu_check_label_after 120 env NORMLAB_LOSS_LABEL_AFTER=1 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_label_after.json" --quick --only losses,loss_options,graphs
    for after in 0 1; do
      step "loss_options_label_after$after" 80 env NORMLAB_LOSS_LABEL_AFTER=$after python3 \
        benchmarks/loss_options.py --out "$OUT/loss_options_label_after$after.jsonl" --reps 10 \
        --max-seconds 60
    done
    step vocab_label_after 200 env NORMLAB_LOSS_LABEL_AFTER=1 python3 \
      benchmarks/vocab_population.py --out "$OUT/vocab_label_after.jsonl" --ops cross_entropy \
      --reps 6 --max-seconds 170
    ;;
  rules)
    step gpu_check_rules 120 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_rules.json" --quick --only replay,lean,graphs
    step host_breakdown 50 python3 benchmarks/host_breakdown.py --calls 4000
    step kernel_asm 30 python3 benchmarks/kernel_asm.py --out "$OUT/asm" --shape 512x768
    step norm_launch_variants 140 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/norm_launch_variants.jsonl" --reps 6 --peers torch,compile,liger --cells \
      "$SMALL_FWD,$SMALL_BWD"
    step population_rules 200 python3 benchmarks/norm_population.py \
      --out "$OUT/population_rules.jsonl" --reps 4 --families random,model,narrow,peers \
      --cells "$RULE_CELLS"
    ;;
  verify)
    step gpu_check_verify 70 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_verify.json" \
      --quick --only losses,graphs
    step vocab_cells 80 python3 benchmarks/vocab_population.py --out "$OUT/vocab_cells.jsonl" \
      --ops cross_entropy,reverse_kl --reps 6 --max-seconds 60 --cells \
      1x32000,1x50257,1x65536,1x131072,3x16950,4x58337,8x32768,8x50257,25x1223,29x13980,41x10926,73x9928,95x4723,100x1049,251x33166,512x50257,4096x131072,16384x32000
    for replay in 1 0; do
      step "overhead_norms_replay$replay" 30 env NORMLAB_REPLAY=$replay python3 -m normlab bench \
        --overhead --op rms_norm,layer_norm --impl normlab,torch \
        --out "$OUT/overhead_norms_replay$replay.json" --no-progress
    done
    step loss_options_verify 60 python3 benchmarks/loss_options.py \
      --out "$OUT/loss_options_verify.jsonl" --reps 10 --max-seconds 40
    for reduce in 1 0; do
      step "overhead_ce_reduce$reduce" 30 env NORMLAB_LOSS_REDUCE=$reduce python3 -m normlab bench \
        --overhead --op cross_entropy --impl normlab,torch \
        --out "$OUT/overhead_ce_reduce$reduce.json" --no-progress
    done
    ;;
  peerkernel)
    step norm_fwd_peer_kernel 240 python3 benchmarks/norm_fwd_peer_kernel.py --reps 6 \
      --out "$OUT/norm_fwd_peer_kernel.jsonl"
    ;;
  rerun)  # the forward's worst members and peer shapes, run again beside their peers
    step population_rerun 420 python3 benchmarks/norm_population.py --reps 4 --timed-us 100 \
      --families random,model,narrow,peers --cells "$RERUN_CELLS" --out "$OUT/population_rerun.jsonl"
    step norm_fwd_peer_kernel_compile 180 python3 benchmarks/norm_fwd_peer_kernel.py --reps 6 \
      --compile-between --cells layer_norm:4096x1024,rms_norm:4096x1024,layer_norm:8192x1024 \
      --out "$OUT/norm_fwd_peer_kernel_compile.jsonl"
    ;;
  staticcompile)  # an eighth of the bf16 population beside torch.compile compiled per member
    static_compile_subset
    ;;
  oddwidths)  # odd widths: planned kernels, variants, torch, a per-cell compile
    check_norms
    step norm_odd_widths 560 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
      rms_norm:1000003x127,layer_norm:1000003x127,rms_norm:1000003x128 \
      --out "$OUT/norm_odd_widths.jsonl"
    ;;
  oddwidths2)
    step norm_odd_widths2 560 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
      layer_norm:8000009x255,rms_norm:1000003x126,layer_norm:1000003x45,rms_norm:1492488x825 \
      --out "$OUT/norm_odd_widths2.jsonl"
    ;;
  narrowodd)  # narrow rows: int32 row offsets checked, then planned tiles against variants
    check_norms
    step norm_narrow_odd 300 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
      rms_norm:10000000x5,layer_norm:10000000x5,rms_norm:10000000x8 \
      --out "$OUT/norm_narrow_odd.jsonl"
    ;;
  narrowodd2)
    step norm_narrow_odd2 560 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
      rms_norm:8000009x7,layer_norm:1000003x31,rms_norm:1184x4,layer_norm:1000003x127 \
      --out "$OUT/norm_narrow_odd2.jsonl"
    ;;
  narrowafter)  # narrow rows after the int32 forward, the prefetch and the tile floor
    check_norms
    step norm_narrow_after 560 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
rms_norm:10000000x5,layer_norm:10000000x5,rms_norm:8000009x7,layer_norm:8000009x7,\
rms_norm:1000003x3,rms_norm:1000003x31,layer_norm:1000003x31,layer_norm:1000003x127,\
rms_norm:1184x4,rms_norm:10428x5,rms_norm:1763x9,layer_norm:3946x10 \
      --out "$OUT/norm_narrow_after.jsonl"
    ;;
  narrowfinal)  # the backward's int32 tiny tiles and RMSNorm's prefetch to 32 columns
    check_norms
    step norm_narrow_final 300 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
rms_norm:10000000x5,layer_norm:10000000x5,rms_norm:8000009x7,rms_norm:1000003x31,\
layer_norm:1000003x31,rms_norm:1000003x3 \
      --out "$OUT/norm_narrow_final.jsonl"
    ;;
  narrowone)  # rows of one column without the backward's prefetch, then the static subset
    step norm_narrow_n1 120 python3 benchmarks/norm_odd_widths.py --reps 3 --cells \
      rms_norm:8000009x1,layer_norm:8000009x1,rms_norm:10000000x1 --out "$OUT/norm_narrow_n1.jsonl"
    static_compile_subset
    ;;
  jsd)  # JSD's shared softplus and lg2.approx, the gradients' exp from one FFMA: bf16 and fp32
    step gpu_check_losses 330 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_losses.json" \
      --dtypes bf16,fp32 --only losses,loss_options
    step loss_options 200 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 170
    ;;
  fusedadd)  # the fused add's backward within its register budget: checked, then its variants
    step gpu_check_norm_options 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norm_options.json" --quick --only norm_options
    step norm_fused_add 380 python3 benchmarks/norm_fused_add.py --out "$OUT/norm_fused_add.jsonl" \
      --reps 10
    ;;
  fusedadd2)  # LayerNorm's fused-add backward without the prefetch: checked, replayed, timed
    step gpu_check_fused_add 250 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fused_add.json" --quick --only norm_options,replay,lean,graphs
    step norm_fused_add 300 python3 benchmarks/norm_fused_add.py --out "$OUT/norm_fused_add.jsonl" \
      --reps 10
    step loss_options 200 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 170
    ;;
  lossregs)  # the fused loss form's register caps against the options' cost; compiled fused add
    for caps in none 2048:72,4096:72 2048:64,4096:72; do
      tag=${caps//[:,]/_}
      step "loss_options_fused_$tag" 150 python3 benchmarks/loss_options.py \
        --out "$OUT/loss_options_fused_$tag.jsonl" --reps 10 --max-seconds 120 --fused-maxnreg "$caps"
    done
    for caps in none 2048:72,4096:72; do
      tag=${caps//[:,]/_}
      step "loss_options_v32768_fused_$tag" 120 python3 benchmarks/loss_options.py --V 32768 \
        --out "$OUT/loss_options_v32768_fused_$tag.jsonl" --reps 10 --max-seconds 90 \
        --fused-maxnreg "$caps"
    done
    step compile_check_norms 150 python3 benchmarks/compile_check.py --norms
    ;;
  probe)  # where the temperature's cost comes from; JSD's form and tile; the fused add's forward
    step loss_form_probe 200 python3 benchmarks/loss_form_probe.py --out "$OUT/loss_form_probe.jsonl" \
      --max-seconds 180
    step loss_form_probe_v32768 120 python3 benchmarks/loss_form_probe.py --V 32768 \
      --out "$OUT/loss_form_probe_v32768.jsonl" --max-seconds 100
    step norm_fused_add 230 python3 benchmarks/norm_fused_add.py --out "$OUT/norm_fused_add.jsonl" \
      --reps 10 --cells 16384x1024,4096x4096,3276x5120,2048x8192
    ;;
  probe2)  # the temperature at the shift; the chunked form's register caps; the fused add's forward
    for regs in 2048:64,4096:64 none; do
      tag=${regs//[:,]/_}
      step "loss_form_probe_chunked_$tag" 120 python3 benchmarks/loss_form_probe.py \
        --out "$OUT/loss_form_probe_chunked_$tag.jsonl" --cases "reverse_kl,reverse_kl T=2,jsd" \
        --forms chunked --caps 1024,2048 --chunked-maxnreg "$regs" --max-seconds 100
    done
    step loss_options 150 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 120
    step norm_fused_add_fwd 200 python3 benchmarks/norm_fused_add.py \
      --out "$OUT/norm_fused_add_fwd.jsonl" --reps 10 --cells 16384x1024,4096x4096,2048x8192
    ;;
  heldcap)  # the temperature at the shift, the held-state cap: checked, then the options timed
    step gpu_check_losses 330 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_losses.json" \
      --dtypes bf16,fp32 --only losses,loss_options
    step loss_options 150 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
      --reps 10 --max-seconds 120
    ;;
  heldcap2)  # the held-state cap at other vocabularies: 50256 (ragged) and 151936
    for v in 50256 151936; do
      step "loss_form_probe_v$v" 120 python3 benchmarks/loss_form_probe.py --V "$v" \
        --out "$OUT/loss_form_probe_v$v.jsonl" --cases "reverse_kl,reverse_kl T=2,jsd" \
        --forms chunked --caps 1024,2048 --max-seconds 100
    done
    ;;
  labelcap)  # label CE's chunked tile with its three options, which spill at 4096
    step loss_form_probe_label 110 python3 benchmarks/loss_form_probe.py \
      --out "$OUT/loss_form_probe_label.jsonl" --cases "cross_entropy,cross_entropy all three" \
      --forms chunked --caps 2048,4096 --max-seconds 90
    ;;
  popall1 | popall2 | popall3)  # the whole norm population at one commit, a third a call
    shard=${STAGE#popall}
    step "population_all_$shard" 570 python3 benchmarks/norm_population.py \
      --out "$OUT/population_all_$shard.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow,peers --impls normlab,torch,compile,liger --shard "$shard/3"
    ;;
  h200pop1 | h200pop23)  # on an H200 only: the loss options, then the population in two calls
    on_h200 || exit 3
    if [ "$STAGE" = h200pop1 ]; then
      step loss_options 150 python3 benchmarks/loss_options.py --out "$OUT/loss_options.jsonl" \
        --reps 10 --max-seconds 100
    fi
    for shard in $(grep -o . <<< "${STAGE#h200pop}"); do
      limit=$((shard == 1 ? 400 : shard == 2 ? 300 : 270))
      step "population_all_$shard" $limit python3 benchmarks/norm_population.py \
        --out "$OUT/population_all_$shard.jsonl" --reps 4 --timed-us 100 \
        --families random,model,narrow,peers --impls normlab,torch,compile,liger --shard "$shard/3"
    done
    ;;
  popall1rest)  # the first third's members that population_part1_bfef810_h200 did not reach
    step population_all_1rest 570 python3 benchmarks/norm_population.py \
      --out "$OUT/population_all_1rest.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow,peers --impls normlab,torch,compile,liger --shard 1/3 \
      --after benchmarks/data/population_part1_bfef810_h200.jsonl.gz
    ;;
  hostpair)  # host µs per call, normlab and torch's op in turn over five rounds
    step overhead_pair 300 python3 -m normlab bench --overhead --impl normlab,torch \
      --out "$OUT/overhead_pair.json" --no-progress
    ;;
  regress)  # normlab alone at the members that got slower, at this commit and at earlier ones
    cells=36052x8363,55536x8495,19335x14487,1329x32826,8000009x256,1000003x256
    mkdir -p /tmp/regress
    run_cells() {  # run_cells NAME: norm_population.py of the current directory's tree
      timeout 75 python3 benchmarks/norm_population.py --out "$OUT/regress_$1.jsonl" --reps 4 \
        --impls normlab --cells "$cells" > "/tmp/regress/$1.log" 2>&1
      echo "== $1: exit $? after ${SECONDS}s"
    }
    run_cells head
    NORMLAB_NORM_PARAMS_APART=0 run_cells head_params_apart_0
    for c in $(ls old 2> /dev/null); do
      in_old "$c" run_cells "old_$c"
    done
    tail -n 3 /tmp/regress/*.log > "$OUT/regress.log"  # with 7 runs' records: 8 files
    ;;
  apartfix)  # LayerNorm's w/b in x's layout; the 256-column backward without the row hint
    step regress_fix 80 python3 benchmarks/norm_population.py --out "$OUT/regress_fix.jsonl" \
      --reps 4 --impls normlab --cells 36052x8363,55536x8495,19335x14487,1329x32826,1000003x256
    NORMLAB_NORM_ROW_ALIGN=0 step regress_fix_hint0 50 python3 benchmarks/norm_population.py \
      --out "$OUT/regress_fix_hint0.jsonl" --reps 4 --impls normlab --cells 1000003x256,8000009x256
    step gpu_check_norms 70 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
      --quick --only norms
    ;;
  rowbudget)  # the block-row backward capped at its planned occupancy's registers, off and on
    NORMLAB_NORM_BLOCK_ROW_BUDGET=1 step gpu_check_norms_budget 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_budget.json" --quick --only norms
    cells=1000003x256,8000009x256,1000003x200,1000003x128,8000009x64,1000003x16,10000000x5
    for on in 0 1; do
      NORMLAB_NORM_BLOCK_ROW_BUDGET=$on step "block_row_budget_$on" 150 \
        python3 benchmarks/norm_population.py --out "$OUT/block_row_budget_$on.jsonl" --reps 4 \
        --impls normlab --cells "$cells"
    done
    ;;
  refit)  # the members whose plan changed after popall, beside their peers
    cells=36052x8363,55536x8495,19335x14487,1329x32826,148884x223,307891x220,2004744x93
    cells=$cells,10000000x69,10000000x70
    for n in 96 100 127 128 200 255 256; do cells=$cells,1000003x$n,8000009x$n; done
    step population_refit 570 python3 benchmarks/norm_population.py \
      --out "$OUT/population_refit.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$cells"
    ;;
  widewarps)  # the fp32/fp16 forwards Liger beats at 768-2048 columns: warps and tiles
    cells=$(for c in 4096x768:fp32 4096x1024:fp32 4096x1536:fp32 4096x2048:fp32 4096x768:fp16 \
      4096x1024:fp16 4096x1024; do printf 'rms_norm:fwd:%s,layer_norm:fwd:%s,' "$c" "$c"; done)
    step wide_warps 540 python3 benchmarks/norm_launch_variants.py --out "$OUT/wide_warps.jsonl" \
      --reps 10 --cells "${cells%,}"
    ;;
  shift)  # rows not vector aligned loaded from their first 16-byte boundary: checks, off and on
    step gpu_check_norms_shift 280 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_shift.json" --dtypes bf16,fp32 --only norms,replay
    off_on NORMLAB_NORM_SHIFT shift 100 "$SHIFT_CELLS"
    cells=rms_norm:16384x1031,layer_norm:16384x1031,rms_norm:4096x4099,layer_norm:4096x4099
    step shift_fp32 90 python3 benchmarks/norm_odd_widths.py --out "$OUT/shift_fp32.jsonl" \
      --direction fwd --dtype fp32 --reps 6 --cells "$cells"
    ;;
  shiftpeers)  # the members the shifted rows changed, beside torch, torch.compile and Liger
    step population_shift 560 python3 benchmarks/norm_population.py \
      --out "$OUT/population_shift.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$SHIFT_TAKEN"
    ;;
  fp32warp)  # fp32 RMSNorm rows of 768 and 1024 columns at 512-65536 rows: launch variants
    cells=$(for m in 512 4096 16384 65536; do for n in 768 1024; do
      printf 'rms_norm:fwd:%sx%s:fp32,' "$m" "$n"; done; done)
    step fp32_warp 400 python3 benchmarks/norm_launch_variants.py --out "$OUT/fp32_warp.jsonl" \
      --reps 10 --cells "${cells%,}"
    ;;
  fp32warprule)  # fp32 RMSNorm rows of 513-1024 columns on one warp: fp32 checks, members, peers
    step gpu_check_norms_fp32warp 240 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_fp32warp.json" --dtypes fp32 --only norms,norm_options
    step population_fp32warp 200 python3 benchmarks/norm_population.py \
      --out "$OUT/population_fp32warp.jsonl" --reps 10 --timed-us 100 --dtypes fp32 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells 4096x768,4096x1024
    ;;
  shiftparams)  # the shifted rows' w/b from shifted copies as vectors: checks, off and on
    step gpu_check_norms_shiftparams 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_shiftparams.json" --quick --only norms,replay
    off_on NORMLAB_NORM_SHIFTED_PARAMS shift_params 120 "$SHIFT_TAKEN"
    ;;
  bwdshift)  # the single-pass backward's odd rows from their first 16-byte boundary: checks, off/on
    step gpu_check_norms_bwdshift 300 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_bwdshift.json" --dtypes bf16,fp32 --only norms,norm_options,replay
    off_on NORMLAB_NORM_BWD_SHIFT bwd_shift 150 "$BWD_SHIFT_TAKEN"
    ;;
  bwdwide)  # one-row backward tiles: prefetch, warps and shifted rows at odd and aligned widths
    cells=$(for c in 36052x8363 27492x9693 19335x14487 16384x12288 4096x16384 80806x4323 \
      263731x1457; do printf 'rms_norm:bwd:%s,' "$c"; done)
    step bwd_wide 540 python3 benchmarks/norm_launch_variants.py --out "$OUT/bwd_wide.jsonl" \
      --reps 4 --peers torch --cells "${cells%,},layer_norm:bwd:80806x4323,layer_norm:bwd:263731x1457"
    ;;
  bwdwide2)  # shifted rows past 8192 columns: warps and programs an SM; the changed members, peers
    cells=$(for c in 36052x8363 27492x9693 19335x14487 34292x14486 16384x12288; do
      printf 'rms_norm:bwd:%s,' "$c"; done)
    step bwd_wide2 200 python3 benchmarks/norm_launch_variants.py --out "$OUT/bwd_wide2.jsonl" \
      --reps 4 --peers torch --cells "${cells%,}"
    step population_bwdshift 380 python3 benchmarks/norm_population.py \
      --out "$OUT/population_bwdshift.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$BWD_SHIFT_TAKEN"
    ;;
  bwdaligned)  # aligned one-row backward tiles past 8192 columns: the launch variants
    cells=$(for c in 512x12288 512x16384 2048x16384 4096x12288 4096x16384 16384x16384 \
      65536x12288 65536x16384 4096x12288:fp32 4096x16384:fp32 4096x16384:fp16; do
      printf 'rms_norm:bwd:%s,' "$c"; done)
    step bwd_aligned 500 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/bwd_aligned.jsonl" --reps 4 --peers torch --cells "${cells%,}"
    ;;
  bwdpeers)  # the aligned members the shifted backward now takes: bf16 checks, then the peers
    step gpu_check_norms_bwdpeers 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_bwdpeers.json" --quick --only norms,norm_options
    step population_bwdaligned 540 python3 benchmarks/norm_population.py \
      --out "$OUT/population_bwdaligned.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger \
      --cells 512x12288,512x16384,2048x16384,4096x12288,4096x16384,16384x12288,16384x16384,65536x12288,65536x16384
    ;;
  bwdblocks)  # the shifted backward's body in two blocks: bf16 checks, one and two blocks, peers
    step gpu_check_norms_bwdblocks 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_bwdblocks.json" --quick --only norms,norm_options
    cells=36052x8363,27492x9693,55536x8495,512x12288,4096x12288,16384x12288,65536x12288
    off_on NORMLAB_NORM_BWD_TWO_BLOCKS bwd_blocks 100 "$cells"
    step population_bwdblocks 300 python3 benchmarks/norm_population.py \
      --out "$OUT/population_bwdblocks.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$cells"
    ;;
  bwdpeershapes)  # the peers' published shapes that the shifted backward takes, beside them
    step population_peers_bwd 150 python3 benchmarks/norm_population.py \
      --out "$OUT/population_peers_bwd.jsonl" --reps 4 --timed-us 100 --families peers \
      --impls normlab,torch,compile,liger --cells 512x16384,2048x16384
    ;;
  shortprobe)  # short calls' fixed cost; the one-row backward at the compile-time width's widest
    step short_call_probe 200 python3 benchmarks/short_call_probe.py \
      --out "$OUT/short_call_probe.jsonl" --reps 40
    cells=$(for c in 32768x8192 16384x8192 4096x8192 65536x4096 16384x6144; do
      printf 'layer_norm:bwd:%s,rms_norm:bwd:%s,' "$c" "$c"; done)
    step bwd_static_wide 420 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/bwd_static_wide.jsonl" --reps 4 --peers liger --cells "${cells%,}"
    ;;
  orderedloads)  # decode forwards' loads in program order: checks, members off and on, the probe
    step gpu_check_norms_ordered 300 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_ordered.json" --dtypes bf16,fp32 --only norms,norm_options,replay
    off_on NORMLAB_ORDERED_LOADS ordered_loads 150 "$ORDERED_CELLS"
    step short_call_probe_ordered 150 python3 benchmarks/short_call_probe.py \
      --out "$OUT/short_call_probe_ordered.jsonl" --reps 40
    ;;
  pointwisepeers)  # rows of one column (w and b loaded after x) and the odd decode rows' warps
    step population_pointwise 200 python3 benchmarks/norm_population.py \
      --out "$OUT/population_pointwise.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger \
      --cells 5265x1,53711x1,1000003x1,8000009x1,10000000x1
    cells=$(for c in 12x973 14x1022 5x3149 115x577 261x1110 75x3310 33x9383 512x1024 8x1024; do
      printf 'rms_norm:fwd:%s,layer_norm:fwd:%s,' "$c" "$c"; done)
    step decode_warps 300 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/decode_warps.jsonl" --reps 10 --peers liger --cells "${cells%,}"
    ;;
  decodewarps)  # decode rows on more warps: checks, the members off and on, beside the peers
    step gpu_check_norms_decodewarps 150 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_decodewarps.json" --quick --only norms,norm_options,replay
    off_on NORMLAB_DECODE_WARPS decode_warps 120 "$ORDERED_CELLS"
    ;;
  decodepeers)  # the members the decode spread changes, beside torch, torch.compile and Liger
    step population_decodewarps 300 python3 benchmarks/norm_population.py \
      --out "$OUT/population_decodewarps.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger \
      --cells 1x768,1x1024,1x1536,1x2048,8x768,8x1024,8x1536,8x2048,12x973,14x1022,115x577
    ;;
  bwdroles)  # a decode batch's backward by role (NORMLAB_NORM_BWD_ROLES): checks, off and on
    step gpu_check_norms_bwdroles 200 env NORMLAB_NORM_BWD_ROLES=1 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_bwdroles.json" --quick --only norms,norm_options,replay,graphs
    off_on NORMLAB_NORM_BWD_ROLES bwd_roles 90 "$ROLES_MEMBERS"
    ;;
  bwdrolespeers)  # the same under torch.compile, and its members beside the peers
    step gpu_check_compile_bwdroles 200 env NORMLAB_NORM_BWD_ROLES=1 python3 \
      benchmarks/gpu_check.py --out "$OUT/gpu_check_compile_bwdroles.json" --quick --only compile
    step population_bwdroles 300 env NORMLAB_NORM_BWD_ROLES=1 python3 benchmarks/norm_population.py \
      --out "$OUT/population_bwdroles.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$ROLES_MEMBERS"
    ;;
  rolesab)  # the backward by role timed: its members off and on, then on beside the peers
    off_on NORMLAB_NORM_BWD_ROLES bwd_roles 90 "$ROLES_MEMBERS"
    step population_bwdroles 300 env NORMLAB_NORM_BWD_ROLES=1 python3 benchmarks/norm_population.py \
      --out "$OUT/population_bwdroles.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$ROLES_MEMBERS"
    ;;
  rolesrule)  # the roles against the two launches past their bounds, beside the peers
    for part in ${ROLES_PARTS:-1 2}; do  # ROLES_PARTS=1 or 2: one step a call
      if [ $part = 1 ]; then shapes="12x973 14x1022 5x3149 16x1024 24x1024 32x1024 64x1024 16x4096"
      else shapes="32x4096 64x4096 16x8192 32x8192 8x12288 8x16384 10x11415 33x9383"; fi
      cells=$(for c in $shapes; do printf 'rms_norm:bwd:%s,layer_norm:bwd:%s,' "$c" "$c"; done)
      step "roles_variants_$part" 280 python3 benchmarks/norm_launch_variants.py \
        --out "$OUT/roles_variants_$part.jsonl" --reps 10 --cells "${cells%,}"
    done
    ;;
  rolesprofile)  # Nsight Compute on the roles launch (12x973), and the norms' host µs now
    for c in layer_norm-bwd:normlab:-:12x973 rms_norm-bwd:normlab:-:12x973 \
             layer_norm-bwd:compile:-:12x973 layer_norm-bwd:normlab:-:14x1022; do
      step "ncu_${c//:/_}" 90 ncu --clock-control none --profile-from-start off --set full \
        --page details python3 benchmarks/profile_kernels.py "$c"
    done
    for run in 1 2; do
      step "overhead_roles$run" 120 python3 -m normlab bench --overhead \
        --op rms_norm,layer_norm --impl normlab,torch --out "$OUT/overhead_roles$run.json" \
        --no-progress
    done
    ;;
  roleswarps)  # the roles launch on four warps: the norm checks, its members beside the peers
    step gpu_check_norms_roleswarps 200 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_roleswarps.json" --quick --only norms,norm_options,replay,graphs
    step population_roleswarps 300 python3 benchmarks/norm_population.py \
      --out "$OUT/population_roleswarps.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger \
      --cells "$ROLES_MEMBERS,5x3149"
    ;;
  rolesrows)  # by role up to 32 rows in one column step: checks, batches at and past the rule
    shapes="17x2049 24x3001 32x3072 24x5120 17x2048 32x2048"  # (32x4096, 32x8192: rolesrule)
    cells=$(for c in $shapes; do printf 'rms_norm:bwd:%s,layer_norm:bwd:%s,' "$c" "$c"; done)
    step roles_rows 200 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/roles_rows.jsonl" --reps 10 --cells "${cells%,}"
    step gpu_check_norms_rolesrows 150 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_norms_rolesrows.json" --quick --only norms
    ;;
  onetile)  # the one-tile backward: variants (outputs checked against the plan), off/on, peers
    cells=$(for c in 8x768 8x1024 8x1536 8x2048 12x973 13x448 14x1022 1x4096 2x8192 4x4096; do
      printf 'rms_norm:bwd:%s,layer_norm:bwd:%s,' "$c" "$c"; done)
    step one_tile_variants 200 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/one_tile_variants.jsonl" --reps 10 --peers torch --cells "${cells%,}"
    members=8x768,8x1024,8x1536,8x2048,12x973,13x448,14x1022
    off_on NORMLAB_NORM_BWD_ONE_TILE one_tile 60 "$members"
    step population_onetile 120 python3 benchmarks/norm_population.py \
      --out "$OUT/population_onetile.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$members"
    ;;
  compiledforms)  # a reduced loss as a (1,) buffer's view; the forms inside torch.compile
    step compile_check_forms 400 python3 benchmarks/compile_check.py
    step overhead_forms 180 python3 -m normlab bench --overhead \
      --op cross_entropy,reverse_kl --impl torch,compile,normlab+compile \
      --out "$OUT/overhead_forms.json" --no-progress
    ;;
  compiledforms2)  # the forms inside torch.compile: traced, opaque, split
    step compiled_host_profile_forms 60 env TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 \
      python3 benchmarks/compiled_host_profile.py --op cross_entropy
    step compiled_loss_forms 500 python3 benchmarks/compiled_loss_forms.py \
      --out "$OUT/compiled_loss_forms.jsonl" --losses cross_entropy,reverse_kl
    ;;
  compiledsplitce)  # compiled label CE on the split form from one row per SM
    step compile_check_splitce 300 python3 benchmarks/compile_check.py --losses
    step compiled_loss_splitce 240 python3 benchmarks/compiled_loss_forms.py \
      --out "$OUT/compiled_loss_splitce.jsonl" --losses cross_entropy --ways traced,opaque \
      --shapes 64x131072,131x131072,132x131072,256x131072,400x131072,256x65536,256x151936
    ;;
  hostnow)  # host µs per call of every op, eager and compiled, three runs
    for run in 1 2 3; do
      step "overhead_hostnow$run" 180 python3 -m normlab bench --overhead \
        --impl normlab,torch,compile,normlab+compile --out "$OUT/overhead_hostnow$run.json" \
        --no-progress
    done
    step compiled_host_profile_hostnow 60 env TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 \
      python3 benchmarks/compiled_host_profile.py --op cross_entropy
    ;;
  lossloops)  # shorter loss loops: a held softcap, the gradient's row scalars, floored factors
    step gpu_check_lossloops 330 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_lossloops.json" --quick --only losses,loss_options
    step loss_options_lossloops 100 python3 benchmarks/loss_options.py \
      --out "$OUT/loss_options_lossloops.jsonl" --reps 10 --max-seconds 60
    ;;
  smoothinf)  # label smoothing: a -inf logit's +inf loss, the whole tiles' sum with no -inf test
    step gpu_check_smoothinf 330 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_smoothinf.json" --quick --only losses,loss_options
    step loss_options_smoothinf 100 python3 benchmarks/loss_options.py \
      --out "$OUT/loss_options_smoothinf.jsonl" --reps 10 --max-seconds 60
    ;;
  worstfwd)  # the members below 0.90x (forwards), twice as the population timed them, with peers
    for run in 1 2; do
      step population_worstfwd$run 200 python3 benchmarks/norm_population.py \
        --out "$OUT/population_worstfwd$run.jsonl" --reps 4 --timed-us 100 \
        --families random,model,narrow --impls normlab,torch,compile,liger --cells "$WORST_FWD"
    done
    ;;
  threadstats)  # label CE's statistics per thread: checked, then timed off and on
    step gpu_check_threadstats 210 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_threadstats.json" --dtypes bf16,fp32 --only losses,loss_options \
      --loss-options cross_entropy
    for vocab in 131072 32768; do
      for on in 0 1; do
        step "loss_options_threads${on}_V$vocab" 85 env NORMLAB_LOSS_THREAD_STATS=$on python3 \
          benchmarks/loss_options.py --V $vocab --out "$OUT/loss_options_threads${on}_V$vocab.jsonl" \
          --reps 10 --max-seconds 40
      done
    done
    ;;
  smooththreads)  # label smoothing with statistics per thread: checked, then timed
    step gpu_check_smooththreads 200 env NORMLAB_LOSS_THREAD_STATS_SMOOTH=1 python3 \
      benchmarks/gpu_check.py --out "$OUT/gpu_check_smooththreads.json" --dtypes bf16,fp32 \
      --only losses,loss_options --loss-options cross_entropy
    step gpu_check_smoothsums 80 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_smoothsums.json" --dtypes bf16 --only loss_options \
      --loss-options cross_entropy
    for state in 0,0 1,0 1,1; do
      step "loss_options_smooth${state/,/}" 90 env NORMLAB_LOSS_THREAD_STATS=${state%,*} \
        NORMLAB_LOSS_THREAD_STATS_SMOOTH=${state#*,} python3 benchmarks/loss_options.py \
        --out "$OUT/loss_options_smooth${state/,/}.jsonl" --reps 10 --max-seconds 50
    done
    ;;
  cevocab)  # label CE over the vocabulary population, beside its peers
    step vocab_cevocab 560 python3 benchmarks/vocab_population.py --ops cross_entropy \
      --out "$OUT/vocab_cevocab.jsonl" --reps 6 --max-seconds 500
    ;;
  fusedgrid)  # the fused loss kernel: one program a row against persistent grids, then options
    step fused_grid 330 python3 benchmarks/fused_grid.py --out "$OUT/fused_grid.jsonl" \
      --V 16384,32768,65536 --per-sm 1,2,3,4,5,6,8 --max-seconds 300
    step loss_options_V32768 85 python3 benchmarks/loss_options.py --V 32768 \
      --out "$OUT/loss_options_V32768.jsonl" --reps 10 --max-seconds 40
    ;;
  fusedstride)  # the fused form's grid rule: checks, ragged rows, the population off and on
    step gpu_check_fusedstride 150 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fusedstride.json" --dtypes bf16 --only losses,loss_options
    step fused_grid_ragged 80 python3 benchmarks/fused_grid.py --out "$OUT/fused_grid_ragged.jsonl" \
      --V 24576,32000,40960 --per-sm 4 --max-seconds 60
    for on in 0 1; do
      step "vocab_stride$on" 160 env NORMLAB_LOSS_FUSED_STRIDE=$on python3 \
        benchmarks/vocab_population.py --ops cross_entropy,reverse_kl --impls normlab \
        --directions fwd+bwd --out "$OUT/vocab_stride$on.jsonl" --reps 6 --max-seconds 140
    done
    ;;
  fusedrule)  # the fused grid rule as it ships: ignored labels first, the options, then checks
    step fused_grid_ignored 60 python3 benchmarks/fused_grid.py \
      --out "$OUT/fused_grid_ignored.jsonl" --ops cross_entropy --ignored 0.5 --V 16384,32768 \
      --per-sm 4 --max-seconds 50
    for on in 0 1; do
      step "loss_options_V32768_stride$on" 90 env NORMLAB_LOSS_FUSED_STRIDE=$on python3 \
        benchmarks/loss_options.py --V 32768 --out "$OUT/loss_options_V32768_stride$on.jsonl" \
        --reps 10 --max-seconds 70
    done
    for rows in 600 800; do
      step "fused_grid_M$rows" 45 python3 benchmarks/fused_grid.py \
        --out "$OUT/fused_grid_M$rows.jsonl" --M $rows --V 16384,32768 --per-sm 4 --max-seconds 35
    done
    step fused_grid_fp32 50 python3 benchmarks/fused_grid.py --out "$OUT/fused_grid_fp32.jsonl" \
      --dtype fp32 --V 4096,8192,16384 --per-sm 4 --max-seconds 40
    step gpu_check_fusedrule 150 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fusedrule.json" --dtypes bf16,fp32 --only losses,loss_options
    ;;
  fusedqueue)  # the fused grid's row queue against striding: skipped rows, overhead, options
    for q in 0 1; do
      step "fused_grid_ignored_queue$q" 45 env NORMLAB_LOSS_FUSED_QUEUE=$q python3 \
        benchmarks/fused_grid.py --out "$OUT/fused_grid_ignored_queue$q.jsonl" \
        --ops cross_entropy --ignored 0.5 --V 16384,32768 --per-sm 4 --max-seconds 35
      step "fused_grid_queue$q" 60 env NORMLAB_LOSS_FUSED_QUEUE=$q python3 \
        benchmarks/fused_grid.py --out "$OUT/fused_grid_queue$q.jsonl" --V 16384,32768,65536 \
        --per-sm 4 --max-seconds 50
    done
    step fused_grid_M1024_queue 40 python3 benchmarks/fused_grid.py \
      --out "$OUT/fused_grid_M1024_queue.jsonl" --M 1024 --V 16384,32768 --per-sm 4 \
      --max-seconds 30
    stride_options queue
    step gpu_check_fusedqueue 120 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fusedqueue.json" --dtypes bf16 --only losses
    ;;
  fusedband)  # label CE's grid in its L2 band: options off and on, the population, checks
    stride_options band
    step vocab_fusedband 300 python3 benchmarks/vocab_population.py --ops cross_entropy \
      --out "$OUT/vocab_fusedband.jsonl" --reps 6 --max-seconds 270
    step gpu_check_fusedband 100 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fusedband.json" --dtypes bf16 --only loss_options
    ;;
  fusedfinal)  # the grid as it ships: the options off and on, the loss checks
    stride_options final
    step gpu_check_fusedfinal 150 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fusedfinal.json" --dtypes bf16,fp32 --only losses,loss_options
    ;;
  fusedcheck)  # the grid through the public call against fp64 and one a row; ignored labels
    step gpu_check_fusedcheck 120 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_fusedcheck.json" --dtypes bf16 --only fused_grid
    step fused_grid_ignored_fusedcheck 60 python3 benchmarks/fused_grid.py \
      --out "$OUT/fused_grid_ignored_fusedcheck.jsonl" --ops cross_entropy --ignored 0.5 \
      --V 16384,32768 --per-sm 4 --max-seconds 45
    ;;
  fusedvocab)  # label CE and reverse KL over the vocabulary population, beside their peers
    step vocab_fusedvocab 560 python3 benchmarks/vocab_population.py \
      --ops cross_entropy,reverse_kl --out "$OUT/vocab_fusedvocab.jsonl" --reps 6 --max-seconds 500
    ;;
  polyexp)  # softcap's gradient exp on the FMA pipe: checked, then timed off and on, twice
    step gpu_check_polyexp 200 env NORMLAB_LOSS_POLY_EXP2=1 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_polyexp.json" --dtypes bf16,fp32 --only loss_options \
      --loss-options cross_entropy
    options_off_on NORMLAB_LOSS_POLY_EXP2 poly
    ;;
  lossprofile)  # what limits the losses at 4096x131072: DRAM bytes, stalls, the XU pipe
    ncu_loss() {  # ncu_loss NAME POLY CASE [--options ...]
      local name=$1 poly=$2
      shift 2
      step "ncu_$name" 110 env NORMLAB_LOSS_POLY_EXP2=$poly ncu --clock-control none \
        --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
        --section InstructionStats --section LaunchStats --metrics \
        dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active \
        --page details python3 benchmarks/profile_kernels.py "$@"
    }
    ncu_loss reverse_kl 0 reverse_kl:chunked:-:4096x131072
    ncu_loss cross_entropy 0 cross_entropy:chunked:-:4096x131072
    ncu_loss smoothing 0 cross_entropy:chunked:-:4096x131072 --options label_smoothing=0.1
    ncu_loss softcap 0 cross_entropy:chunked:-:4096x131072 --options softcap=30
    ncu_loss softcap_poly 1 cross_entropy:chunked:-:4096x131072 --options softcap=30
    ;;
  lossvocab)  # the three losses over the vocabulary population, beside their peers
    step vocab_lossvocab 450 python3 benchmarks/vocab_population.py \
      --out "$OUT/vocab_lossvocab.jsonl" --reps 6 --max-seconds 400
    ;;
  losstriton)  # the losses as Triton ops: Inductor launches their kernels where shapes are static
    step compile_check_losstriton 300 python3 benchmarks/compile_check.py --losses
    step overhead_losstriton 200 python3 -m normlab bench --overhead \
      --op cross_entropy,reverse_kl,soft_cross_entropy --impl normlab,torch,compile,normlab+compile \
      --out "$OUT/overhead_losstriton.json" --no-progress
    step compiled_loss_losstriton 300 python3 -m normlab bench --no-progress \
      --op cross_entropy,reverse_kl --shapes 256x131072,4096x32768,4096x131072,528x50257 \
      --direction fwd+bwd --impl compile,normlab,normlab+compile --reps 20 \
      --out "$OUT/compiled_loss_losstriton.jsonl"
    step gpu_check_losstriton 240 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_losstriton.json" --quick --only compile,graphs,losses
    ;;
  jsdvocab)  # forward KL and JSD over the vocabulary population, beside their peers
    jsd_vocab 540 440
    ;;
  addpop1 | addpop2)  # the fused add-norms over the model widths, half a call
    add_pop "${STAGE#addpop}" 560
    ;;
  dhlatepop)  # the widest fused-add members with dh after the row sums off, then on
    for late in 0 1; do
      step "population_dhlate_$late" 100 env NORMLAB_NORM_BWD_DH_LATE=$late \
        python3 benchmarks/norm_population.py --ops add_rms_norm --out \
        "$OUT/population_dhlate_$late.jsonl" --reps 4 --timed-us 100 --families model \
        --dtypes bf16 --impls normlab,liger --cells 4096x16384,16384x16384,65536x16384,65536x12288
    done
    ;;
  oneprog)  # the one-program block-row backward: the norm checks with it on, its tiles beside
    # the planned grid and peers, then the population members it plans, off and on, with peers
    step gpu_check_norms 150 env NORMLAB_NORM_BLOCK_ROW_BWD_ONE_PROGRAM_ELEMS=65536 \
      python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" --quick --only norms
    step norm_one_program 240 python3 benchmarks/norm_odd_widths.py --reps 3 --direction bwd \
      --one-program --cells "$ONE_PROGRAM_CELLS" --out "$OUT/norm_one_program.jsonl"
    for elems in 0 65536; do
      step "population_oneprog_$elems" 90 env NORMLAB_NORM_BLOCK_ROW_BWD_ONE_PROGRAM_ELEMS=$elems \
        python3 benchmarks/norm_population.py --out "$OUT/population_oneprog_$elems.jsonl" \
        --reps 4 --timed-us 100 --families random --impls normlab,torch,compile,liger \
        --cells "$ONE_PROGRAM_MEMBERS"
    done
    ;;
  normcheck)  # every norm strategy x layout against fp64 at gpu_check's shapes
    check_norms
    ;;
  addorder)  # the norm checks, then the backward's order variants at 8192-16384 columns
    check_norms
    step norm_fused_order 240 python3 benchmarks/norm_fused_add.py --ops rms_norm --reps 10 \
      --cells 4096x16384,16384x16384,65536x16384,16384x12288,65536x12288,65536x8192 \
      --out "$OUT/norm_fused_order.jsonl"
    ;;
  addwidth)  # is 16384 columns slower per byte than the widths under it, and Liger's not?
    step norm_fused_width 240 python3 benchmarks/norm_fused_add.py --ops rms_norm --reps 10 \
      --bwd "fused add planned,plain planned,liger fused add backward,fused add padded inputs,plain padded inputs" \
      --cells 65536x16384,65536x16376,65536x16000,65536x14336,65536x12288,16384x16384 \
      --out "$OUT/norm_fused_width.jsonl"
    ;;
  addtwopass)  # the single pass's cliff past 12288 columns against two passes and split rows
    variants=$(bwd_variants "two pass 4x4096" "two pass 1x4096 on 8 warps 4 a SM" \
      "two pass 2x4096" "two pass 1x8192" "split rows")
    step norm_fused_twopass 240 python3 benchmarks/norm_fused_add.py --ops rms_norm --reps 10 \
      --bwd "$variants" --cells 65536x16384,65536x14336,16384x16384,4096x16384,65536x12288 \
      --out "$OUT/norm_fused_twopass.jsonl"
    ;;
  addprofile)  # what changes between 12288 and 14336 columns, as the profiler counts it
    step norm_bwd_profile 400 ncu --clock-control none --set full --import-source no \
      --kernel-name regex:'norm_bwd|fused_add_rms_norm_backward' -o "$OUT/norm_bwd_profile" \
      python3 benchmarks/norm_bwd_profile.py --cells 65536x12288,65536x13312,65536x14336
    step norm_fused_cliff 240 python3 benchmarks/norm_fused_add.py --ops rms_norm --reps 10 \
      --bwd "fused add planned,fused add on 32 warps,fused add no register cap,plain planned,liger fused add backward" \
      --cells 65536x12288,65536x12800,65536x13312,65536x13824,65536x14336,65536x16384 \
      --out "$OUT/norm_fused_cliff.jsonl"
    step norm_bwd_profile_details 120 ncu -i "$OUT/norm_bwd_profile.ncu-rep" --page details
    step norm_bwd_profile_raw 120 ncu -i "$OUT/norm_bwd_profile.ncu-rep" --page raw --csv
    ;;
  addliger)  # RMSNorm's backward in Liger-Kernel's order past 12288 columns: the norm checks,
    # then liger_order_runs
    step gpu_check_norms 300 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
      --quick --only norms,norm_options
    liger_order_runs
    ;;
  addligerpop)  # liger_order_runs alone
    liger_order_runs
    ;;
  lnwarps)  # the backward's single pass at 4096-8192 columns on 8, 16 (planned) and 32 warps
    v="plain planned,plain on 8 warps,plain on 32 warps,plain 2 a SM on 8 warps"
    v="$v,plain Liger order 16 warps,fused add planned,fused add on 32 warps"
    step norm_bwd_warps 300 python3 benchmarks/norm_fused_add.py --ops layer_norm,rms_norm \
      --reps 10 --bwd "$v" --out "$OUT/norm_bwd_warps.jsonl" \
      --cells 32768x8192,16384x8192,4096x8192,32768x6144,65536x4096,8192x8192
    ;;
  addfp32)  # the fused add's backward prefetch in fp32 (it spills at the 128-register budget)
    step gpu_check_prefetch_regs 240 env NORMLAB_NORM_BWD_PREFETCH_REGS=1 \
      python3 benchmarks/gpu_check.py --out /tmp/gpu_check_prefetch_regs.json \
      --only norms,norm_options --dtypes fp32  # the log has every line
    v="fused add planned,fused add no prefetch,fused add prefetching,plain planned"
    v="$v,liger fused add backward"
    for dt in fp32 bf16; do
      step "norm_fused_prefetch_$dt" 200 python3 benchmarks/norm_fused_add.py --ops rms_norm \
        --dtype $dt --reps 10 --bwd "$v" --out "$OUT/norm_fused_prefetch_$dt.jsonl" \
        --cells 21845x768,16384x1024,8192x2048,5461x3072,4096x4096,3276x5120,2048x8192,65536x4096
    done
    step population_prefetch_0 150 env NORMLAB_NORM_BWD_PREFETCH_REGS=0 \
      python3 benchmarks/norm_population.py --ops add_rms_norm --dtypes fp32 \
      --families model,random --impls normlab,torch,compile,liger --reps 4 --timed-us 100 \
      --out "$OUT/population_prefetch_0.jsonl"
    step population_prefetch_1 100 env NORMLAB_NORM_BWD_PREFETCH_REGS=1 \
      python3 benchmarks/norm_population.py --ops add_rms_norm --dtypes fp32 \
      --families model,random --impls normlab --reps 4 --timed-us 100 \
      --out "$OUT/population_prefetch_1.jsonl"
    ;;
  addfp32pop)  # the fp32 fused-add members at the prefetch's register bound, with peers
    step population_fp32add 300 python3 benchmarks/norm_population.py --ops add_rms_norm \
      --dtypes fp32 --families model,random --impls normlab,torch,compile,liger --reps 4 \
      --timed-us 100 --out "$OUT/population_fp32add.jsonl"
    on_h200 && notebooks_on 280
    ;;
  plainfp32)  # the plain backward's prefetch by dtype at the population's model widths
    v="plain planned,plain no prefetch,plain prefetching"
    cells=4096x768,4096x1024,4096x1536,4096x2048,4096x2560,4096x2880,4096x3072,4096x3584
    cells=$cells,4096x4096,4096x5120,4096x6144,4096x7168,4096x8192,65536x2048,65536x4096
    for dt in fp32 bf16; do
      step "norm_plain_prefetch_$dt" 200 python3 benchmarks/norm_fused_add.py \
        --ops rms_norm,layer_norm --dtype $dt --reps 10 --bwd "$v" \
        --out "$OUT/norm_plain_prefetch_$dt.jsonl" --cells "$cells"
    done
    ;;
  warmcold)  # time_warm against time_call on the RMSNorm backward; on an H200, notebook 03
    step warm_vs_cold 120 python3 benchmarks/warm_vs_cold.py
    on_h200 && notebooks_on 200 notebooks/03-bounded-partials-and-wide-rows.ipynb
    ;;
  onewave)  # one-row forwards of about one wave: w/b early or late, 1-8 warps, beside peers
    cells=783x120,1000x120,868x136,593x37,800x400,1655x400,3000x400,8000x400,1500x768
    cells=$cells,1687x1718,3000x1718,512x2880,1000x2880,900x4096,2000x1000,13x448
    cells=$(for op in rms_norm layer_norm; do for c in ${cells//,/ }; do printf '%s:fwd:%s,' \
      $op "$c"; done; done)
    step norm_fwd_onewave 420 python3 benchmarks/norm_launch_variants.py --reps 6 \
      --peers torch,liger --only '^row w(1|2|4|8) (early|late)$' \
      --out "$OUT/norm_fwd_onewave.jsonl" --cells "${cells%,}"
    on_h200 && notebooks_on 150 notebooks/03-bounded-partials-and-wide-rows.ipynb
    ;;
  onewaverule)  # the one-row forward's one warp and early parameters: checks, members off/on, peers
    step gpu_check_norms 120 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
      --quick --only norms
    one_wave_peers 120
    step population_onewave_0 60 env NORMLAB_NORM_FWD_ONE_WARP=0 NORMLAB_NORM_FWD_EARLY_ROWS=0 \
      python3 benchmarks/norm_population.py --ops rms_norm,layer_norm --families random \
      --impls normlab --reps 4 --timed-us 100 --cells "$ONE_WAVE_MEMBERS" \
      --out "$OUT/population_onewave_0.jsonl"
    on_h200 && notebooks_on 120 notebooks/03-bounded-partials-and-wide-rows.ipynb
    ;;
  onewaveh200)  # on an H200 only: the members the one-row forward rules change, notebook 03
    on_h200 || exit 3
    one_wave_peers 100
    notebooks_on 120 notebooks/03-bounded-partials-and-wide-rows.ipynb
    ;;
  h200refresh)  # on an H200 only: the members below target and the one-row rules', notebook 03
    on_h200 || exit 3
    refresh_cells population_refresh 330
    notebooks_on 150 notebooks/03-bounded-partials-and-wide-rows.ipynb
    ;;
  lnstages)  # LayerNorm's row loop in stages: the norm checks, its members off and on
    step gpu_check_norms 150 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
      --quick --only norms
    ln_stages_ab 90 100
    ;;
  lnstagesab)  # LayerNorm's row loop in stages off and on, normlab alone, the members only
    ln_stages_ab 65 60
    ;;
  loopl2)  # RMSNorm's looped row bounded by the L2: fp32 rows either side of it, off and on
    for run in 0 1; do
      NORMLAB_NORM_FWD_LOOP_L2=$run step "launch_variants_loopl2_$run" 150 python3 \
        benchmarks/norm_launch_variants.py --out "$OUT/launch_variants_loopl2_$run.jsonl" \
        --reps 8 --peers liger --only "row w(8|16)$" --cells "$LOOP_L2_CELLS"
    done
    ;;
  onerow)  # the members the split forward's bound moves, beside peers; one-row backwards' tiles
    step population_splitfwd 150 python3 benchmarks/norm_population.py \
      --ops rms_norm,layer_norm --families random,model --impls normlab,torch,compile,liger \
      --reps 4 --timed-us 100 --cells 106x18159,3x29755,4096x16384 \
      --out "$OUT/population_splitfwd.jsonl"
    step population_addrow 90 python3 benchmarks/norm_population.py \
      --ops add_rms_norm,add_layer_norm --families model --dtypes bf16 \
      --impls normlab,torch,compile,liger --reps 6 --timed-us 100 --cells 1x768,1x4096,8x768 \
      --out "$OUT/population_addrow.jsonl"
    cells=$(for op in rms_norm layer_norm; do for c in 1x768 1x1024 1x4096 3x768; do
      printf '%s:bwd:%s,' $op "$c"; done; done)
    step launch_variants_onerow 120 python3 benchmarks/norm_launch_variants.py --reps 8 \
      --peers torch,compile --only "tiles of|one tile" --cells "${cells%,}" \
      --out "$OUT/launch_variants_onerow.jsonl"
    step fused_add_onerow 90 python3 benchmarks/norm_fused_add.py --reps 10 \
      --cells 1x768,1x4096 --out "$OUT/fused_add_onerow.jsonl"
    cells=$(for op in rms_norm layer_norm; do for c in 8x4099 8x9383 33x9383 8x18159 48x18159 \
      106x18159 131x18159 12x973 115x577 106x8191; do printf '%s:fwd:%s,' $op "$c"; done; done)
    step launch_variants_shifted 120 python3 benchmarks/norm_launch_variants.py --reps 8 \
      --peers liger --only "^row w(4|8|16)( shifted)?$" --cells "${cells%,}" \
      --out "$OUT/launch_variants_shifted.jsonl"
    ;;
  onerowrule)  # decode batches of 32 KiB rows shifted, one-program backwards prefetching: checks
    step gpu_check_norms 150 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
      --quick --only norms
    step population_shiftfwd 90 python3 benchmarks/norm_population.py \
      --ops rms_norm,layer_norm --families random --impls normlab,torch,compile,liger --reps 4 \
      --timed-us 100 --cells 106x18159 --out "$OUT/population_shiftfwd.jsonl"
    step population_addrow 60 python3 benchmarks/norm_population.py \
      --ops add_rms_norm,add_layer_norm --families model --dtypes bf16 --impls normlab,compile \
      --reps 6 --timed-us 100 --cells 1x768,1x4096 --out "$OUT/population_addrow.jsonl"
    ;;
  reducefit)  # the reduce's tile cut to the partial rows: checks, then off and on
    step gpu_check_norms 150 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_norms.json" \
      --quick --only norms
    for run in 0 1; do
      NORMLAB_NORM_REDUCE_FIT=$run step "population_reducefit_$run" 90 python3 \
        benchmarks/norm_population.py --ops rms_norm,layer_norm --impls normlab --reps 6 \
        --timed-us 100 --families random,model,narrow \
        --cells 106x18159,3x29755,296x17767,482x27361,1329x32826,13x448,14x1022,868x136 \
        --out "$OUT/population_reducefit_$run.jsonl"
    done
    ;;
  ligerfp16)  # the 4096 x 1024 forwards: normlab and Liger alone, twice, in both harnesses
    for run in 1 2; do
      step "population_liger_fp16_$run" 60 python3 benchmarks/norm_population.py \
        --ops rms_norm,layer_norm --families model --dtypes fp16,bf16,fp32 --impls normlab,liger \
        --reps 4 --timed-us 100 --cells 4096x1024 --out "$OUT/population_liger_fp16_$run.jsonl"
    done
    cells=$(for op in rms_norm layer_norm; do for d in fp16 bf16 fp32; do
      printf '%s:fwd:4096x1024:%s,' $op $d; done; done)
    step launch_variants_liger_fp16 90 python3 benchmarks/norm_launch_variants.py --reps 8 \
      --peers liger --only "^row w4$" --cells "${cells%,}" \
      --out "$OUT/launch_variants_liger_fp16.jsonl"
    ;;
  leancompile)  # compiled calls that read only their path to the op, against the package before
    step compile_check_lean 200 python3 benchmarks/compile_check.py
    lean=(rms_norm,cross_entropy,reverse_kl torch,compile,normlab+compile)
    tree_overhead lean_head "${lean[@]}"
    in_old 34bf16c tree_overhead lean_old "${lean[@]}"
    # Dynamo's frame and guards alone (the graph replaced by its outputs), both packages
    step compiled_guards_head 60 python3 benchmarks/compiled_guards.py \
      --out "$OUT/compiled_guards_head.json"
    PYTHONPATH=$PWD/old/34bf16c:/tmp/site NORMLAB_COMMIT=34bf16c step compiled_guards_old 60 \
      python3 benchmarks/compiled_guards.py --out "$OUT/compiled_guards_old.json"
    ;;
  h200worst)  # on an H200 only: h200refresh's cells, then the FMA-pipe exp off and on once
    on_h200 || exit 3
    refresh_cells population_worst 200
    for on in 0 1; do
      step "loss_options_poly$on" 90 env NORMLAB_LOSS_POLY_EXP2=$on python3 \
        benchmarks/loss_options.py --out "$OUT/loss_options_poly$on.jsonl" --reps 10 --max-seconds 50
    done
    ;;
  native)  # the C++ node and replay: checks, then host µs (the JSON files travel as one .tgz)
    step gpu_check_native 240 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_native.json" \
      --quick --only replay,graphs,lean
    for i in 1 2 3; do
      step "overhead_native$i" 150 python3 -m normlab bench --overhead --impl normlab,torch \
        --out "$OUT/overhead_native$i.json" --no-progress
    done
    for on in 0 1; do
      NORMLAB_NATIVE=$on step "overhead_norms_native$on" 100 python3 -m normlab bench --overhead \
        --impl normlab,torch --op rms_norm,layer_norm --out "$OUT/overhead_norms_native$on.json" \
        --no-progress
    done
    (cd "$OUT" && tar -czf native_json.tgz --remove-files ./*.json)
    ;;
  devices)  # on two GPUs: inputs on cuda:1 while cuda:0 is current, every op against fp64
    step gpu_check_devices 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_devices.json" \
      --only devices,replay
    ;;
  launchargs)  # a user kernel's placeholder pointers and Inductor's static launch, host µs
    step compiled_launch_args 150 python3 benchmarks/compiled_launch_args.py \
      --out "$OUT/compiled_launch_args.json"
    TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1 TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 \
      step compiled_host_profile_static 150 python3 benchmarks/compiled_host_profile.py \
      --op rms_norm,cross_entropy
    ;;
  h200fwd)  # on an H200 only: the forwards below 0.90x at bfef810, one row a program and tiles
    on_h200 || exit 3
    cells=rms_norm:fwd:8x1024,layer_norm:fwd:8x1024,rms_norm:fwd:8x2560,rms_norm:fwd:4096x2560:fp16
    for c in 4096x1024:fp16 4096x1024 4096x768:fp32 4096x768:fp16; do
      cells=$cells,rms_norm:fwd:$c,layer_norm:fwd:$c
    done
    step launch_variants_h200fwd 300 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/launch_variants_h200fwd.jsonl" --reps 10 --only "^row w|^tile" \
      --peers torch,compile,liger --cells "$cells"
    ;;
  lossclone)  # the loss kernels' absent tensors as None, addresses Inductor reads: checked, then
    # the compiled loss call's kernels against old/25d7ad4 (the package before)
    step gpu_check_lossclone 300 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_lossclone.json" --quick --only losses,loss_options,loss_replay
    step compiled_loss_kernels 80 python3 benchmarks/compiled_loss_kernels.py \
      --out "$OUT/compiled_loss_kernels.json"
    in_old 25d7ad4 step compiled_loss_kernels_old 80 python3 \
      ../../benchmarks/compiled_loss_kernels.py --out "$OUT/compiled_loss_kernels_old.json"
    ;;
  losscompile)  # the compile and CUDA-graph checks alone (260 s did not reach them after the rest)
    step gpu_check_losscompile 560 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_losscompile.json" --quick --only compile,graphs
    ;;
  lossclonehost)  # host µs per call of the compiled losses, this tree and old/25d7ad4 in turn
    losses=(cross_entropy,reverse_kl compile,normlab+compile)
    for n in 1 3; do
      tree_overhead "lossclone$n" "${losses[@]}"
      in_old 25d7ad4 tree_overhead "lossclone_old$((n + 1))" "${losses[@]}"
    done
    ;;
  normnone)  # every norm kernel's absent tensors as None (the code: norm_launch_code_*_sm90)
    step gpu_check_normnone 560 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_normnone.json" --quick --only norms,norm_options
    ;;
  normnonegraphs)  # the same inside torch.compile, the lean launch, replay and CUDA graphs
    step gpu_check_normnonegraphs 560 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_normnonegraphs.json" --quick --only compile,lean,replay,graphs
    ;;
  normnonehost)  # host µs per call of the norms, this tree and old/4247c27 in turn, twice
    norms=(rms_norm,layer_norm torch,compile,normlab,normlab+compile)
    for n in 1 3; do
      tree_overhead "normnone$n" "${norms[@]}"
      in_old 4247c27 tree_overhead "normnone_old$((n + 1))" "${norms[@]}"
    done
    ;;
  noneargs)  # the norm forward's absent tensors as None: checked, then host µs against old/05be588
    step gpu_check_noneargs 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_noneargs.json" \
      --quick --only norms,norm_options,compile,lean,replay
    norms=(rms_norm,layer_norm torch,compile,normlab,normlab+compile)
    for n in 1 3; do  # old/05be588: the package before (git archive, carried)
      tree_overhead "none_head$n" "${norms[@]}"
      in_old 05be588 tree_overhead "none_old$((n + 1))" "${norms[@]}"
    done
    (cd "$OUT" && tar -czf noneargs_json.tgz --remove-files ./*.json)
    ;;
  nativecheck)  # native's checks, then host µs of the norms with the node off and on, once
    step gpu_check_native 200 python3 benchmarks/gpu_check.py --out "$OUT/gpu_check_native.json" \
      --quick --only replay,graphs,lean,devices
    for on in 0 1; do
      NORMLAB_NATIVE=$on step "overhead_norms_native$on" 80 python3 -m normlab bench --overhead \
        --impl normlab,torch --op rms_norm,layer_norm --out "$OUT/overhead_norms_native$on.json" \
        --no-progress
    done
    ;;
  pastint32)  # rows whose offsets pass 2**31 elements, against fp64
    step gpu_check_pastint32 240 python3 benchmarks/gpu_check.py \
      --out "$OUT/gpu_check_pastint32.json" --only int64
    ;;
  pending)  # the untimed stages in one call, each while the call's 600 s still hold its limits
    for stage in leancompile:0 reducefit:330 ligerfp16:210; do
      name=${stage%:*} need=${stage#*:}
      if [ "$SECONDS" -gt $((600 - need)) ]; then
        echo "== $name: skipped at ${SECONDS}s (its steps take up to ${need}s)"
        continue
      fi
      mkdir -p "$OUT/$name" && OUT="$OUT/$name" bash "$0" "$name"
      (cd "$OUT" && tar -czf "$name.tgz" --remove-files "$name")
    done
    ;;
  inductorbwd)  # the row loop in stages against the prefetch; Inductor's backward, its kernels
    step launch_variants_stages 90 python3 benchmarks/norm_launch_variants.py \
      --out "$OUT/launch_variants_stages.jsonl" --reps 6 --only "stages|prefetch on w16 uns" \
      --peers liger \
      --cells layer_norm:bwd:32768x8192,rms_norm:bwd:32768x8192,layer_norm:bwd:16384x4096
    step inductor_norm_bwd 280 python3 benchmarks/inductor_norm_bwd.py --out "$OUT/inductor" \
      --cells 32768x8192 --ops layer_norm,rms_norm --reps 10
    tar -czf "$OUT/inductor.tgz" -C "$OUT" inductor && rm -r "$OUT/inductor"
    ;;
  h200pops)  # jsdvocab, addpop1 and addpop2, then worstfwd once, in one call
    jsd_vocab 200 150
    add_pop 1 120
    add_pop 2 120
    step population_worstfwd1 120 python3 benchmarks/norm_population.py \
      --out "$OUT/population_worstfwd1.jsonl" --reps 4 --timed-us 100 \
      --families random,model,narrow --impls normlab,torch,compile,liger --cells "$WORST_FWD"
    ;;
  notebooks)  # every notebook executed live: nbclient, ipykernel, plotly, ipywidgets as wheels
    notebooks_on 480
    ;;
  flushstate)
    step l2_flush_state 300 python3 benchmarks/l2_flush_state.py --reps 20 \
      --out "$OUT/l2_flush_state.json"
    ;;
esac
# At most 8 files come back from a device call: past that, the logs travel as one logs.tgz, and
# past that again everything as round.tgz (unpack with tar -xzf).
packed() { find "$OUT" -maxdepth 1 -type f | wc -l; }
if [ "$(packed)" -gt 8 ] && ls "$OUT"/*.log > /dev/null 2>&1; then
  (cd "$OUT" && tar -czf logs.tgz --remove-files ./*.log)
fi
if [ "$(packed)" -gt 8 ]; then
  (cd "$OUT" && tar -czf /tmp/round.tgz --remove-files ./* && mv /tmp/round.tgz .)
fi
