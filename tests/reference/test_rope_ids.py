"""`posenc rope-ids` against HF transformers v5's M-RoPE position ids, re-implemented here
in torch from HF's code (transformers v5, src/transformers/modeling_rope_utils.py:
get_mrope_vision_positions, _mrope_index_interleaved_runs (the layout of Qwen2-VL,
Qwen2.5-VL and Qwen3-VL's get_rope_index: `mrope_layout` "interleaved_runs") and
_mrope_index_audio_chunked (Qwen2.5-Omni's get_rope_index), as HF's main branch holds
them in its v5 series; the per-model v5 get_rope_index of qwen2_5_vl computes the same
`tokens_per_second * int(second_per_grid_ts[i])` interval):

- the reference takes what HF takes: input_ids, mm_token_type_ids (or placeholder
  token ids for Omni), image/video grid_thw, second_per_grid_ts, audio mel lengths;
  the test builds them from the same prompt the layout SPEC describes;
- ids and mrope_position_deltas equal exactly (integers), for text only, image first,
  consecutive images, videos with whole and fractional seconds, Qwen3-VL frames with
  timestamp text, Omni audio, images and videos;
- GLM-4V: Glm4vModel.get_rope_index (src/transformers/models/glm4v/modeling_glm4v.py as
  the index stores it at commit 03eac6f6; every block from the previous max id + 1, a
  video's frames told apart by the timestamp text between them, video tokens being image
  tokens between video start and end tokens);
- end to end: the ids fed to `posenc rope --mrope-section 6,5,5 --position-ids` give
  HF's apply_multimodal_rotary_pos_emb (hf_reference.mrope_cos_sin) within 1e-10;
- the same prompts as HF's own inputs (`--input-ids` with the grid tensors and the media
  token ids, from options or a config), and a batch of two rows ([3, b, s], grids taken
  in order across rows);
- bad layouts: exit 2 with one line and no output file; bad token inputs (a run whose
  length is not its grid's, grids left over or missing, malformed grid tensors): exit 3.
"""
import itertools
import json
import os
import unittest

import h5py
import numpy as np
import torch

import hf_reference as hf
from posenc_testlib import PosencTestCase

F64 = dict(rtol=1e-10, atol=1e-12)

# Qwen2.5-Omni's token ids (Qwen2_5OmniThinkerConfig defaults).
IMAGE, VIDEO, AUDIO = 151655, 151656, 151646
VISION_START, AUDIO_START = 151652, 151647
TEXT = 1000


# --- HF v5 modeling_rope_utils, re-implemented (attention_mask None, batch 1) ---------

def get_mrope_vision_positions(start_position, grid_thw, temporal_merge_size=1,
                               spatial_merge_size=1, time_interval=1, dtype=torch.long):
    llm_grid_t = int(grid_thw[0]) // temporal_merge_size
    llm_grid_h = int(grid_thw[1]) // spatial_merge_size
    llm_grid_w = int(grid_thw[2]) // spatial_merge_size
    position_temporal = (torch.arange(llm_grid_t) * time_interval).to(dtype)
    position_height = torch.arange(llm_grid_h, dtype=dtype) + start_position
    position_width = torch.arange(llm_grid_w, dtype=dtype) + start_position
    t, h, w = torch.meshgrid(position_temporal, position_height, position_width, indexing="ij")
    ids = torch.stack([t, h, w], dim=0).reshape(3, -1)
    ids[0] += start_position
    return ids


def positions_block(length, start):
    return torch.arange(int(length), dtype=torch.long).view(1, -1).expand(3, -1) + start


def interleaved_runs(input_ids, mm_token_type_ids, spatial_merge_size, image_grid_thw=None,
                     video_grid_thw=None, second_per_grid_ts=None, tokens_per_second=None,
                     split_video_frames=False):
    """_mrope_index_interleaved_runs for one sequence: (position_ids [3, 1, s], deltas)."""
    if split_video_frames and video_grid_thw is not None:
        video_grid_thw = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)
        video_grid_thw[:, 0] = 1
    grid_iters = {1: iter(image_grid_thw) if image_grid_thw is not None else None,
                  2: iter(video_grid_thw) if video_grid_thw is not None else None}
    second_iter = (iter(second_per_grid_ts) if second_per_grid_ts is not None
                   else iter([1] * input_ids.shape[1]))
    token_types = mm_token_type_ids[0]
    groups = []
    for key, group in itertools.groupby(enumerate(token_types.tolist()), lambda x: x[1]):
        group = list(group)
        groups.append((key, group[0][0], group[-1][0] + 1))
    current_pos = 0
    blocks = []
    for modality, start, end in groups:
        if modality == 0:
            blocks.append(positions_block(end - start, current_pos))
            current_pos += end - start
        else:
            grid_thw = next(grid_iters[modality])
            if modality == 2 and tokens_per_second is not None:
                time_interval = tokens_per_second * int(next(second_iter))
            else:
                time_interval = 1
            blocks.append(get_mrope_vision_positions(current_pos, grid_thw, 1, spatial_merge_size,
                                                     time_interval))
            current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size
    positions = torch.cat(blocks, dim=1).reshape(3, -1)
    return positions, int(positions.max() + 1 - input_ids.shape[1])


def audio_length_pooled(audio_seqlen):
    return ((audio_seqlen - 1) // 2 + 1 - 2) // 2 + 1


def temporal_chunks(temporal_positions, positions_per_chunk, start_position):
    """_mrope_temporal_chunks."""
    chunks = []
    chunk_start, chunk_index = 0, 1
    for index in range(len(temporal_positions)):
        if temporal_positions[index] - start_position >= chunk_index * positions_per_chunk:
            chunks.append((chunk_start, index))
            chunk_start = index
            chunk_index += 1
    chunks.append((chunk_start, len(temporal_positions)))
    return chunks


def audio_chunked(input_ids, spatial_merge_size, position_id_per_seconds, image_grid_thw=None,
                  video_grid_thw=None, second_per_grid_ts=None, audio_seqlens=None,
                  use_audio_in_video=False, seconds_per_chunk=2.0):
    """_mrope_index_audio_chunked for one sequence."""
    token_ids = input_ids[0]
    input_tokens = token_ids.tolist()
    blocks = []

    def next_position():
        return blocks[-1].max() + 1 if blocks else 0

    def block(length, start=None):
        return positions_block(length, next_position() if start is None else start)

    vision_start_indices = torch.argwhere(token_ids == VISION_START).squeeze(1)
    vision_tokens = token_ids[vision_start_indices + 1]
    num_audios = (token_ids == AUDIO_START).sum()
    num_images = (vision_tokens == IMAGE).sum()
    num_videos = ((vision_tokens == AUDIO_START).sum() if use_audio_in_video
                  else (vision_tokens == VIDEO).sum())
    remain_images, remain_videos, remain_audios = num_images, num_videos, num_audios
    image_idx = video_idx = audio_idx = 0
    num_spans = (num_images + num_audios if use_audio_in_video
                 else num_images + num_videos + num_audios)
    st = 0
    for _ in range(num_spans):
        unreachable = len(input_tokens) + 1
        ed_image = (input_tokens.index(IMAGE, st) if IMAGE in input_tokens and remain_images > 0
                    else unreachable)
        ed_video = (input_tokens.index(VIDEO, st) if VIDEO in input_tokens and remain_videos > 0
                    else unreachable)
        ed_audio = (input_tokens.index(AUDIO, st) if AUDIO in input_tokens and remain_audios > 0
                    else unreachable)
        min_ed = min(ed_image, ed_video, ed_audio)
        text_len = min_ed - st - (2 if min_ed == ed_video and use_audio_in_video else 1)
        if text_len != 0:
            blocks.append(block(text_len))
        if min_ed == ed_audio:
            blocks.append(block(1))
            audio_len = audio_length_pooled(audio_seqlens[audio_idx])
            blocks.append(block(audio_len))
            blocks.append(block(1))
            st += int(text_len + 1 + audio_len + 1)
            audio_idx += 1
            remain_audios -= 1
        elif min_ed == ed_image:
            blocks.append(block(1))
            grid_thw = image_grid_thw[image_idx]
            blocks.append(get_mrope_vision_positions(next_position(), grid_thw,
                                                     spatial_merge_size=spatial_merge_size,
                                                     time_interval=position_id_per_seconds))
            image_len = grid_thw.prod() // (spatial_merge_size ** 2)
            blocks.append(block(1))
            st += int(text_len + 1 + image_len + 1)
            image_idx += 1
            remain_images -= 1
        elif min_ed == ed_video and use_audio_in_video:
            bos_position = next_position()
            blocks.append(block(1, bos_position))
            blocks.append(block(1, bos_position))
            span_start = next_position()
            grid_thw = video_grid_thw[video_idx]
            audio_len = audio_length_pooled(audio_seqlens[audio_idx])
            audio_positions = block(audio_len, span_start)
            video_positions = get_mrope_vision_positions(
                span_start, grid_thw, spatial_merge_size=spatial_merge_size,
                time_interval=float(second_per_grid_ts[video_idx]) * position_id_per_seconds)
            positions_per_chunk = int(position_id_per_seconds * seconds_per_chunk)
            video_chunks = temporal_chunks(video_positions[0], positions_per_chunk, span_start)
            audio_chunks = temporal_chunks(audio_positions[0], positions_per_chunk, span_start)
            for video_chunk, audio_chunk in itertools.zip_longest(video_chunks, audio_chunks):
                if video_chunk is not None:
                    blocks.append(video_positions[:, video_chunk[0]:video_chunk[1]])
                if audio_chunk is not None:
                    blocks.append(audio_positions[:, audio_chunk[0]:audio_chunk[1]])
            video_len = grid_thw.prod() // (spatial_merge_size ** 2)
            eos_position = next_position()
            blocks.append(block(1, eos_position))
            blocks.append(block(1, eos_position))
            st += int(text_len + 2 + audio_len + video_len + 2)
            audio_idx += 1
            video_idx += 1
            remain_videos -= 1
            remain_audios -= 1
        else:
            blocks.append(block(1))
            grid_thw = video_grid_thw[video_idx]
            blocks.append(get_mrope_vision_positions(
                next_position(), grid_thw, spatial_merge_size=spatial_merge_size,
                time_interval=float(second_per_grid_ts[video_idx]) * position_id_per_seconds))
            video_len = grid_thw.prod() // (spatial_merge_size ** 2)
            blocks.append(block(1))
            st += int(text_len + 1 + video_len + 1)
            video_idx += 1
            remain_videos -= 1
    if st < len(input_tokens):
        blocks.append(block(len(input_tokens) - st))
    positions = torch.cat(blocks, dim=1).reshape(3, -1)
    return positions, int(positions.max() + 1 - len(input_tokens))


GLM_IMAGE, GLM_VIDEO_START, GLM_VIDEO_END = 151343, 151341, 151342


def glm4v_rope_index(input_ids, spatial_merge_size, image_grid_thw=None, video_grid_thw=None):
    """Glm4vModel.get_rope_index for one sequence, attention_mask all ones."""
    input_tokens = input_ids[0].tolist()
    token_type = []
    in_video = False
    for token in input_tokens:
        if token == GLM_VIDEO_START:
            in_video = True
        elif token == GLM_VIDEO_END:
            in_video = False
        if token == GLM_IMAGE and not in_video:
            token_type.append("image")
        elif token == GLM_IMAGE and in_video:
            token_type.append("video")
        else:
            token_type.append("text")
    groups = []
    for key, group in itertools.groupby(enumerate(token_type), lambda x: x[1]):
        group = list(group)
        groups.append((key, group[0][0], group[-1][0] + 1))
    image_index = video_index = video_group_index = 0
    blocks = []
    video_frame_num = 1
    for modality, start, end in groups:
        st_idx = blocks[-1].max() + 1 if blocks else 0
        if modality == "image":
            t, h, w = image_grid_thw[image_index]
            gt, gh, gw = t.item(), h.item() // spatial_merge_size, w.item() // spatial_merge_size
            t_index = torch.arange(gt).view(-1, 1).expand(-1, gh * gw).flatten()
            h_index = torch.arange(gh).view(1, -1, 1).expand(gt, -1, gw).flatten()
            w_index = torch.arange(gw).view(1, 1, -1).expand(gt, gh, -1).flatten()
            blocks.append(torch.stack([t_index, h_index, w_index]) + st_idx)
            image_index += 1
            video_frame_num = 1
        elif modality == "video":
            gt = video_frame_num
            gh = video_grid_thw[video_index][1].item() // spatial_merge_size
            gw = video_grid_thw[video_index][2].item() // spatial_merge_size
            for t_idx in range(gt):
                t_index = torch.tensor(t_idx).view(-1, 1).expand(-1, gh * gw).flatten()
                h_index = torch.arange(gh).view(1, -1, 1).expand(1, -1, gw).flatten()
                w_index = torch.arange(gw).view(1, 1, -1).expand(1, gh, -1).flatten()
                blocks.append(torch.stack([t_index, h_index, w_index]) + st_idx)
            video_group_index += 1
            if video_group_index >= video_grid_thw[video_index][0]:
                video_index += 1
                video_group_index = 0
            video_frame_num += 1
        else:
            blocks.append(torch.arange(end - start).view(1, -1).expand(3, -1) + st_idx)
            video_frame_num = 1
    positions = torch.cat(blocks, dim=1).reshape(3, -1)
    return positions, int(positions.max() + 1 - len(input_tokens))


# --- HF's inputs for a prompt ----------------------------------------------------------

def qwen_inputs(segments, merge, split_frames=False):
    """input_ids, mm_token_type_ids and grids for [(kind, value), ...]: ("text", n),
    ("image", (t, h, w)), ("video", (t, h, w, seconds, gap))."""
    types, images, videos, seconds = [], [], [], []
    for kind, v in segments:
        if kind == "text":
            types += [0] * v
        elif kind == "image":
            images.append(v)
            types += [1] * (v[0] * (v[1] // merge) * (v[2] // merge))
        else:
            t, h, w, secs, gap = v
            videos.append((t, h, w))
            seconds.append(secs)
            frame = (h // merge) * (w // merge)
            if split_frames:
                for k in range(t):
                    types += ([0] * gap if k else []) + [2] * frame
            else:
                types += [2] * (t * frame)
    ids = torch.tensor([[{0: TEXT, 1: IMAGE, 2: VIDEO}[k] for k in types]], dtype=torch.long)
    return dict(input_ids=ids, mm_token_type_ids=torch.tensor([types]),
                image_grid_thw=torch.tensor(images) if images else None,
                video_grid_thw=torch.tensor(videos) if videos else None,
                second_per_grid_ts=torch.tensor(seconds) if seconds else None)


def omni_inputs(segments, merge):
    """Token ids with each media segment's start token ending the text before it."""
    tokens, images, videos, seconds, mels = [], [], [], [], []
    for kind, v in segments:
        if kind == "text":
            tokens += [TEXT] * v
            continue
        if kind == "audio":  # v: mel length
            tokens[-1] = AUDIO_START
            mels.append(v)
            tokens += [AUDIO] * audio_length_pooled(v)
        elif kind == "image":
            tokens[-1] = VISION_START
            images.append(v)
            tokens += [IMAGE] * (v[0] * (v[1] // merge) * (v[2] // merge))
        elif len(v) == 5:  # a video with its soundtrack (mel length v[4]): its own 2+2 wrappers
            t, h, w, secs, mel = v
            videos.append((t, h, w))
            seconds.append(secs)
            mels.append(mel)
            tokens += [VISION_START, AUDIO_START] + [VIDEO] * (t * (h // merge) * (w // merge))
            tokens += [AUDIO] * audio_length_pooled(mel) + [TEXT, TEXT]
        else:
            t, h, w, secs = v
            tokens[-1] = VISION_START
            videos.append((t, h, w))
            seconds.append(secs)
            tokens += [VIDEO] * (t * (h // merge) * (w // merge))
    return dict(input_ids=torch.tensor([tokens]),
                image_grid_thw=torch.tensor(images) if images else None,
                video_grid_thw=torch.tensor(videos) if videos else None,
                second_per_grid_ts=torch.tensor(seconds) if seconds else None,
                audio_seqlens=torch.tensor(mels) if mels else None)


def norm(segments):
    """Video entries padded to (t, h, w, seconds or None, gap or None); Omni's videos with
    audio have the mel length of their soundtrack in place of the gap."""
    return [(k, tuple(v) + (None,) * (5 - len(v)) if k == "video" else v) for k, v in segments]


def glm4v_inputs(segments, merge):
    """Token ids: a video's start token ends the text before it, its end token begins the
    text after it; (t, h, w, None, gap) videos have gap text tokens between frames."""
    tokens, images, videos = [], [], []
    close_video = False
    for kind, v in segments:
        if kind == "text":
            tokens += [TEXT] * v
            if close_video:
                tokens[-v] = GLM_VIDEO_END
                close_video = False
        elif kind == "image":
            images.append(v)
            tokens += [GLM_IMAGE] * (v[0] * (v[1] // merge) * (v[2] // merge))
        else:
            t, h, w, _, gap = v
            tokens[-1] = GLM_VIDEO_START
            videos.append((t, h, w))
            for k in range(t):
                tokens += ([TEXT] * gap if k else []) + [GLM_IMAGE] * ((h // merge) * (w // merge))
            close_video = True
    return dict(input_ids=torch.tensor([tokens]),
                image_grid_thw=torch.tensor(images) if images else None,
                video_grid_thw=torch.tensor(videos) if videos else None)


def spec_of(segments, omni=False):
    out = []
    for kind, v in norm(segments):
        if kind == "text":
            out.append(f"text:{v}")
        elif kind == "audio":
            out.append(f"audio:{audio_length_pooled(v)}")
        elif kind == "image":
            out.append("image:{}x{}x{}".format(*v))
        elif omni and len(v) == 5 and v[4] is not None:
            out.append("video:{}x{}x{}@{}+audio:{}".format(*v[:4], audio_length_pooled(v[4])))
        else:
            s = "video:{}x{}x{}".format(*v[:3])
            if v[3] is not None:
                s += f"@{v[3]}"
            if not omni and v[4] is not None:
                s += f"/{v[4]}"
            out.append(s)
    return ",".join(out)


TOKEN_ARGS = ["--image-token-id", IMAGE, "--video-token-id", VIDEO, "--audio-token-id", AUDIO]
GLM_TOKEN_ARGS = ["--image-token-id", GLM_IMAGE, "--video-start-token-id", GLM_VIDEO_START,
                  "--video-end-token-id", GLM_VIDEO_END]


class RopeIds(PosencTestCase):

    def ids(self, family, spec, *args, out="ids.npy"):
        path = self.path(out)
        self.run_ok("rope-ids", "--family", family, "--layout", spec, "-o", path, *args)
        return np.load(path) if out.endswith(".npy") else path

    def ids_from_tokens(self, family, inp, *args, token_args=TOKEN_ARGS):
        """The input-ids form: HF's own tensors as files."""
        files = ["--input-ids", self.npy("in_ids.npy", inp["input_ids"].numpy())]
        for key, flag in (("image_grid_thw", "--image-grid-thw"),
                          ("video_grid_thw", "--video-grid-thw"),
                          ("second_per_grid_ts", "--second-per-grid-ts")):
            if inp.get(key) is not None:
                files += [flag, self.npy(f"{key}.npy", inp[key].numpy())]
        out = self.path("tok.npy")
        self.run_ok("rope-ids", "--family", family, *files, *token_args, *args, "-o", out)
        got = np.load(out)
        self.assertEqual(got.shape, (3, 1, inp["input_ids"].shape[1]))  # [3, b, s] for [b, s]
        return got[:, 0]

    def check_qwen(self, family, segments, merge=2, tps=None, split=False):
        hf_segments = [(k, (v[0], v[1], v[2], 1.0 if v[3] is None else v[3], v[4])
                        if k == "video" else v) for k, v in norm(segments)]
        inp = qwen_inputs(hf_segments, merge, split_frames=split)
        ref, delta = interleaved_runs(
            inp["input_ids"], inp["mm_token_type_ids"], merge, inp["image_grid_thw"],
            inp["video_grid_thw"], inp["second_per_grid_ts"], tps, split)
        args = ["--spatial-merge-size", merge]
        if tps is not None:
            args += ["--tokens-per-second", tps]
        spec = spec_of(segments)
        path = self.ids(family, spec, *args, out="ids.h5:/ids")
        with h5py.File(self.path("ids.h5"), "r") as f:
            got = f["ids"][()]
            attrs = dict(f["ids"].attrs)
        self.assertEqual(got.dtype, np.int64)
        np.testing.assert_array_equal(got, ref.numpy(), err_msg=f"{family} {spec}")
        self.assertEqual(int(attrs["mrope_position_delta"]), delta, spec)
        self.assertEqual(attrs["family"], family)
        os.remove(self.path("ids.h5"))
        if tps is None or family == "qwen2.5-vl":
            tok = self.ids_from_tokens(family, inp, *args)
            np.testing.assert_array_equal(tok, ref.numpy(), err_msg=f"{family} {spec} from input_ids")
        return got

    def test_qwen2_vl(self):
        for segs in (
            [("text", 7)],                                           # text only
            [("image", (1, 4, 6)), ("text", 3)],                     # image first
            [("text", 5), ("image", (1, 4, 6)), ("text", 3), ("video", (2, 4, 4, None)),
             ("text", 1)],
            [("text", 2), ("image", (1, 8, 4)), ("text", 2), ("image", (1, 2, 6)),
             ("text", 2)],                                           # consecutive images
            [("text", 1), ("video", (9, 4, 4, None)), ("text", 4)],  # t beyond max(h, w)
            [("image", (1, 6, 6)), ("video", (3, 2, 4, None))],      # image then video, ends on it
        ):
            self.check_qwen("qwen2-vl", segs)
        self.check_qwen("qwen2-vl", [("text", 2), ("image", (2, 9, 6)), ("text", 1)], merge=3)

    def test_qwen2_5_vl(self):
        for tps in (2, 4, 25):
            for segs in (
                [("text", 4), ("video", (3, 4, 4, 2.0)), ("text", 2)],
                [("text", 4), ("video", (4, 4, 6, 0.5)), ("text", 2)],   # int(0.5) = 0
                [("text", 4), ("video", (4, 4, 6, 1.5)), ("text", 2), ("video", (2, 2, 2, 3.7)),
                 ("text", 1)],
                [("video", (5, 2, 2, None)), ("text", 3)],              # no seconds: 1
                [("text", 3), ("image", (1, 4, 4)), ("video", (2, 4, 4, 2.0)), ("text", 1)],
            ):
                self.check_qwen("qwen2.5-vl", segs, tps=tps)

    def test_qwen3_vl(self):
        for segs in (
            [("text", 3), ("video", (3, 4, 6, None, 5)), ("text", 2)],
            [("text", 1), ("image", (1, 4, 4)), ("text", 4), ("video", (1, 8, 8, None, None)),
             ("text", 2)],
            [("video", (2, 2, 2, None, 1))],
        ):
            self.check_qwen("qwen3-vl", segs, split=True)

    def check_omni(self, segments, merge=2, pips=25, spc=None):
        inp = omni_inputs(segments, merge)
        av = any(k == "video" and len(v) == 5 for k, v in segments)
        chunk_args = [] if spc is None else ["--seconds-per-chunk", spc]
        ref, delta = audio_chunked(inp["input_ids"], merge, pips, inp["image_grid_thw"],
                                   inp["video_grid_thw"], inp["second_per_grid_ts"],
                                   inp["audio_seqlens"], use_audio_in_video=av,
                                   seconds_per_chunk=2.0 if spc is None else spc)
        spec = spec_of(segments, omni=True)
        got = self.ids("qwen2.5-omni", spec, "--spatial-merge-size", merge,
                       "--position-id-per-seconds", pips, *chunk_args)
        np.testing.assert_array_equal(got, ref.numpy(), err_msg=spec)
        self.assertEqual(got.shape[1], inp["input_ids"].shape[1])
        p = self.run_ok("-v", "rope-ids", "--family", "qwen2.5-omni", "--layout", spec,
                        "--position-id-per-seconds", pips, "--spatial-merge-size", merge,
                        *chunk_args, "-o", self.path("v.npy"))
        self.assertIn(f"mrope_position_delta {delta}", p.stderr)
        if av:
            return  # the input-ids form does not read a video's interleaved soundtrack
        tok = self.ids_from_tokens("qwen2.5-omni", inp, "--spatial-merge-size", merge,
                                   "--position-id-per-seconds", pips)
        np.testing.assert_array_equal(tok, ref.numpy(), err_msg=f"{spec} from input_ids")
        p = self.run_ok("-v", "rope-ids", "--family", "qwen2.5-omni", "--layout", spec,
                        "--position-id-per-seconds", pips, "--spatial-merge-size", merge,
                        "-o", self.path("v.npy"))
        self.assertIn(f"mrope_position_delta {delta}", p.stderr)

    def test_qwen2_5_omni(self):
        self.check_omni([("text", 3), ("audio", 100), ("text", 2)])
        self.check_omni([("text", 1), ("image", (1, 4, 6)), ("text", 3), ("audio", 37),
                         ("text", 1)])
        for secs in (2.0, 0.5, 0.3, 1.7, 0.04):
            self.check_omni([("text", 2), ("video", (4, 4, 4, secs)), ("text", 2),
                             ("image", (1, 2, 2)), ("text", 1)])
        self.check_omni([("text", 2), ("video", (6, 2, 2, 0.3)), ("text", 1)], pips=13)

    def test_qwen2_5_omni_audio_in_video(self):
        # use_audio_in_video: a video and its soundtrack cut into seconds_per_chunk chunks.
        for segs, kw in (
            ([("text", 2), ("video", (4, 4, 4, 2.0, 800)), ("text", 3)], {}),
            ([("video", (3, 2, 4, 0.5, 300))], {}),                          # first and last
            ([("text", 1), ("video", (8, 2, 2, 0.3, 100)), ("text", 2), ("image", (1, 4, 4)),
              ("text", 2), ("audio", 60), ("text", 1)], {}),
            ([("text", 1), ("video", (4, 4, 2, 1.0, 200)), ("video", (2, 2, 2, 2.0, 30)),
              ("text", 1)], dict(spc=0.7)),                                  # back to back
            ([("text", 1), ("video", (5, 6, 6, 2.0, 16)), ("text", 1)], dict(pips=7, spc=3.0)),
            # the last chunk is audio, whose ids stay below the video's: the end tokens and
            # the text after them continue from the audio's (HF's blocks[-1].max() + 1)
            ([("text", 1), ("video", (1, 60, 60, 2.0, 40)), ("text", 2)], {}),
        ):
            with self.subTest(segs=segs):
                self.check_omni(segs, **kw)

    def test_glm4v(self):
        for segs in (
            [("text", 4)],
            [("image", (1, 4, 6)), ("text", 2)],
            [("text", 2), ("image", (1, 4, 6)), ("text", 3), ("image", (2, 2, 2)), ("text", 1)],
            [("text", 2), ("video", (3, 4, 4, None, 2)), ("text", 1), ("image", (1, 4, 6)),
             ("text", 1)],
            [("text", 1), ("video", (1, 8, 2, None, None)), ("text", 3),
             ("video", (4, 2, 4, None, 5)), ("text", 2)],
        ):
            inp = glm4v_inputs(norm(segs), 2)
            ref, delta = glm4v_rope_index(inp["input_ids"], 2, inp["image_grid_thw"],
                                          inp["video_grid_thw"])
            spec = spec_of(segs)
            got = self.ids("glm4v", spec)
            np.testing.assert_array_equal(got, ref.numpy(), err_msg=spec)
            tok = self.ids_from_tokens("glm4v", inp, token_args=GLM_TOKEN_ARGS)
            np.testing.assert_array_equal(tok, ref.numpy(), err_msg=f"{spec} from input_ids")
            p = self.run_ok("-v", "rope-ids", "--family", "glm4v", "--layout", spec, "-o",
                            self.path("v.npy"))
            self.assertIn(f"mrope_position_delta {delta}", p.stderr)

    def test_input_ids_batch(self):
        # Two rows of 11 tokens; the grids are taken in order across rows, as HF's iterators.
        a = qwen_inputs([("text", 3), ("image", (1, 4, 6)), ("text", 2)], 2)
        b = qwen_inputs([("text", 5), ("image", (1, 2, 4)), ("text", 4)], 2)
        ids = torch.cat([a["input_ids"], b["input_ids"]])
        types = torch.cat([a["mm_token_type_ids"], b["mm_token_type_ids"]])
        grids = torch.cat([a["image_grid_thw"], b["image_grid_thw"]])
        ref_a, da = interleaved_runs(a["input_ids"], a["mm_token_type_ids"], 2, grids[:1])
        ref_b, db = interleaved_runs(b["input_ids"], b["mm_token_type_ids"], 2, grids[1:])
        self.assertEqual(types.shape, ids.shape)
        out = self.path("batch.h5")
        self.run_ok("rope-ids", "--family", "qwen2-vl", "--input-ids", self.npy("b.npy", ids.numpy()),
                    "--image-grid-thw", self.npy("g.npy", grids.numpy().astype(np.int32)),
                    *TOKEN_ARGS, "-o", out)
        with h5py.File(out, "r") as f:
            got = f["position_ids"][()]
            deltas = list(f["position_ids"].attrs["mrope_position_deltas"])
        self.assertEqual(got.shape, (3, 2, 11))
        np.testing.assert_array_equal(got[:, 0], ref_a.numpy())
        np.testing.assert_array_equal(got[:, 1], ref_b.numpy())
        self.assertEqual(deltas, [da, db])

    def padded_batch(self, family, rows, pad_value, reference, token_args, left, glm=False):
        """Rows of different lengths padded to one (left or right) with an attention_mask,
        against HF's _mrope_place_positions: positions on the unpadded tokens, padded
        slots at pad_value, delta = max + 1 - unpadded length (GLM-4V: - padded length)."""
        s = max(r["input_ids"].shape[1] for r in rows)
        ids = np.zeros((len(rows), s), np.int64)
        mask = np.zeros((len(rows), s), np.int64)
        want = np.full((3, len(rows), s), pad_value, np.int64)
        deltas = []
        for b, r in enumerate(rows):
            n = r["input_ids"].shape[1]
            cols = slice(s - n, s) if left else slice(0, n)
            ids[b, cols] = r["input_ids"][0].numpy()
            mask[b, cols] = 1
            pos, _ = reference(r)
            want[:, b, cols] = pos.numpy()
            deltas.append(int(pos.max()) + 1 - (s if glm else n))
        grids = {}
        for key in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts"):
            parts = [r[key] for r in rows if r.get(key) is not None]
            if parts:
                grids[key] = torch.cat(parts)
        files = []
        for key, flag in (("image_grid_thw", "--image-grid-thw"),
                          ("video_grid_thw", "--video-grid-thw"),
                          ("second_per_grid_ts", "--second-per-grid-ts")):
            if key in grids:
                files += [flag, self.npy(f"{key}.npy", grids[key].numpy())]
        out = self.path("padded.h5")
        if os.path.exists(out):
            os.remove(out)
        self.run_ok("rope-ids", "--family", family, "--input-ids", self.npy("ids.npy", ids),
                    "--attention-mask", self.npy("mask.npy", mask.astype(bool)), *files,
                    *token_args, "-o", out)
        with h5py.File(out, "r") as f:
            got = f["position_ids"][()]
            self.assertEqual(list(f["position_ids"].attrs["mrope_position_deltas"]), deltas)
        np.testing.assert_array_equal(got, want, err_msg=f"{family} left={left}")

    def test_input_ids_padding(self):
        q = [qwen_inputs([("text", 3), ("image", (1, 4, 6)), ("text", 2)], 2),
             qwen_inputs([("text", 1), ("video", (3, 2, 2, 2.0, None)), ("text", 1)], 2),
             qwen_inputs([("text", 5)], 2)]
        for left in (True, False):
            self.padded_batch(
                "qwen2.5-vl", q, 0,
                lambda r: interleaved_runs(r["input_ids"], r["mm_token_type_ids"], 2,
                                           r["image_grid_thw"], r["video_grid_thw"],
                                           r["second_per_grid_ts"], 2),
                TOKEN_ARGS + ["--tokens-per-second", 2], left)
            o = [omni_inputs([("text", 2), ("audio", 50), ("text", 1)], 2),
                 omni_inputs([("text", 1), ("image", (1, 4, 4)), ("text", 3)], 2)]
            self.padded_batch(
                "qwen2.5-omni", o, 1,
                lambda r: audio_chunked(r["input_ids"], 2, 25, r["image_grid_thw"],
                                        audio_seqlens=r["audio_seqlens"]),
                TOKEN_ARGS, left)
            g = [glm4v_inputs(norm([("text", 2), ("video", (2, 4, 4, None, 1)), ("text", 1)]), 2),
                 glm4v_inputs(norm([("text", 1), ("image", (1, 2, 4)), ("text", 1)]), 2)]
            self.padded_batch(
                "glm4v", g, 1,
                lambda r: glm4v_rope_index(r["input_ids"], 2, r["image_grid_thw"],
                                           r["video_grid_thw"]),
                GLM_TOKEN_ARGS, left, glm=True)
        ids = self.npy("i.npy", np.array([[TEXT, TEXT]]))
        out = self.path("m.npy")
        for mask, match in ((np.array([[0, 0]]), "no token"), (np.array([[1, 2]]), "0 or 1"),
                            (np.array([1, 1]), "shape")):
            self.assert_fails(3, "rope-ids", "--family", "qwen2-vl", "--input-ids", ids,
                              "--attention-mask", self.npy("mk.npy", mask), *TOKEN_ARGS,
                              "-o", out, match=match)
        self.assertFalse(os.path.exists(out))

    def test_input_ids_errors(self):
        inp = qwen_inputs([("text", 3), ("image", (1, 4, 6)), ("text", 2)], 2)
        ids = self.npy("i.npy", inp["input_ids"].numpy())
        out = self.path("e.npy")
        base = ["rope-ids", "--family", "qwen2-vl", "--input-ids", ids, *TOKEN_ARGS, "-o", out]
        self.assert_fails(3, *base, "--image-grid-thw", self.npy("g.npy", np.array([[1, 4, 4]])),
                          match="6 image tokens, but its grid")
        self.assert_fails(3, *base, "--image-grid-thw",
                          self.npy("g.npy", np.array([[1, 4, 6], [1, 2, 2]])), match="1 of 2")
        self.assert_fails(3, *base, match="no --image-grid-thw row left")
        self.assert_fails(3, *base, "--image-grid-thw", self.npy("g.npy", np.array([1, 4, 6])),
                          match="n, 3")
        self.assert_fails(3, *base, "--image-grid-thw", self.npy("g.npy", np.array([[1, 0, 6]])),
                          match="1 to")
        self.assert_fails(3, *base, "--image-grid-thw",
                          self.npy("g.npy", np.array([[1.0, 4.0, 6.0]])), match="integer")
        self.assert_fails(2, *base, "--layout", "text:1", match="one of the two")
        self.assert_fails(2, "rope-ids", "--family", "qwen2-vl", "-o", out, match="one of")
        self.assert_fails(2, "rope-ids", "--family", "qwen2-vl", "--layout", "text:1",
                          "--image-grid-thw", self.path("g.npy"), "-o", out, match="input-ids")
        self.assert_fails(3, "rope-ids", "--family", "qwen2-vl", "--input-ids",
                          self.path("missing.npy"), *TOKEN_ARGS, "-o", out)
        self.assertFalse(os.path.exists(out))

    def test_hf_config(self):
        cfg = self.path("config.json")
        with open(cfg, "w") as f:
            json.dump({"model_type": "qwen2_5_vl",
                       "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}}, f)
        a = self.ids("qwen2.5-vl", "text:2,video:3x4x4@2,text:1", "--tokens-per-second", 2)
        p = self.path("b.npy")
        self.run_ok("rope-ids", "--hf-config", cfg, "--layout", "text:2,video:3x4x4@2,text:1",
                    "-o", p)
        np.testing.assert_array_equal(np.load(p), a)
        self.assertEqual(list(a[0, 2:14:4]), [2, 6, 10])
        # An Omni config keeps its keys under thinker_config.
        with open(cfg, "w") as f:
            json.dump({"model_type": "qwen2_5_omni", "thinker_config": {
                "position_id_per_seconds": 10, "vision_config": {"spatial_merge_size": 1}}}, f)
        self.run_ok("rope-ids", "--hf-config", cfg, "--layout", "text:1,video:2x1x1@1,text:1",
                    "-o", p)
        np.testing.assert_array_equal(np.load(p)[0], [0, 1, 11, 12])
        # Token ids from the config (Qwen2.5-Omni's thinker spells them _index).
        with open(cfg, "w") as f:
            json.dump({"model_type": "qwen2_5_omni", "thinker_config": {
                "image_token_index": IMAGE, "video_token_index": VIDEO,
                "audio_token_index": AUDIO, "vision_config": {"spatial_merge_size": 2}}}, f)
        inp = omni_inputs([("text", 2), ("image", (1, 4, 4)), ("text", 2), ("audio", 40),
                           ("text", 1)], 2)
        ref, _ = audio_chunked(inp["input_ids"], 2, 25, inp["image_grid_thw"],
                               audio_seqlens=inp["audio_seqlens"])
        self.run_ok("rope-ids", "--hf-config", cfg, "--input-ids",
                    self.npy("t.npy", inp["input_ids"].numpy()[0]), "--image-grid-thw",
                    self.npy("g.npy", inp["image_grid_thw"].numpy()), "-o", p)
        np.testing.assert_array_equal(np.load(p), ref.numpy())  # [s] in, [3, s] out
        with open(cfg, "w") as f:
            json.dump({"model_type": "llama"}, f)
        self.assert_fails(3, "rope-ids", "--hf-config", cfg, "--layout", "text:1", "-o", p,
                          match="model_type")

    def test_end_to_end_rope(self):
        # posenc rope with the ids gives HF's apply_multimodal_rotary_pos_emb.
        segs = [("text", 3), ("image", (1, 4, 6)), ("text", 2), ("video", (2, 4, 4, 2.0)),
                ("text", 2)]
        ids = self.ids("qwen2.5-vl", spec_of(segs), "--tokens-per-second", 2)
        inp = qwen_inputs(norm(segs), 2)
        ref_ids, _ = interleaved_runs(inp["input_ids"], inp["mm_token_type_ids"], 2,
                                      inp["image_grid_thw"], inp["video_grid_thw"],
                                      inp["second_per_grid_ts"], 2)
        s = ids.shape[1]
        rng = np.random.default_rng(5)
        x = rng.standard_normal((1, 2, s, 32))
        inv = torch.from_numpy(1.0 / 10000.0 ** (np.arange(0, 32, 2) / 32))
        cos, sin = hf.mrope_cos_sin(inv, ref_ids, [6, 5, 5], False)
        ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin).numpy()
        xin, out = self.npy("x.npy", x), self.path("y.npy")
        self.run_ok("rope", xin, "-o", out, "--mrope-section", "6,5,5", "--position-ids",
                    self.path("ids.npy"))
        np.testing.assert_allclose(np.load(out), ref, **F64)

    def test_bad_layouts(self):
        out = self.path("bad.npy")
        cases = [
            ("qwen2-vl", "", "empty"),
            ("qwen2-vl", "text:", "decimal"),
            ("qwen2-vl", "text:5,", "empty segment"),
            ("qwen2-vl", "txt:5", "unknown kind"),
            ("qwen2-vl", "text5", "KIND:VALUE"),
            ("qwen2-vl", "image:1x4", "TxHxW"),
            ("qwen2-vl", "image:1x4x4x4", "decimal|TxHxW"),
            ("qwen2-vl", "image:0x4x4", "1 to"),
            ("qwen2-vl", "image:1x-4x4", "decimal"),
            ("qwen2-vl", "text:0", "1 to"),
            ("qwen2-vl", "image:1x3x4", "multiples"),
            ("qwen2-vl", "text:1,image:1x4x4,image:1x4x4", "no text between"),
            ("qwen2-vl", "text:1,audio:4", "audio"),
            ("qwen2-vl", "text:1,video:2x4x4@2", "seconds"),
            ("qwen2.5-vl", "text:1,video:2x4x4@2", "tokens-per-second"),
            ("qwen2.5-vl", "text:1,video:2x4x4@-2", "seconds per grid"),
            ("qwen2.5-vl", "text:1,video:2x4x4@nan", "seconds per grid"),
            ("qwen2.5-vl", "text:1,video:2x4x4@1e-3", "seconds per grid"),
            ("qwen2.5-vl", "text:1,video:2x4x4@0.0000001", "seconds per grid"),
            ("qwen3-vl", "text:1,video:2x4x4,text:1", "GAP"),
            ("qwen2-vl", "text:1,video:2x4x4/3", "qwen3-vl"),
            ("qwen2.5-omni", "image:1x4x4,text:1", "start and an end"),
            ("qwen2.5-omni", "text:1,audio:5,text:1,audio:5,text:1", "start and an end"),
            ("qwen2.5-omni", "text:1,video:2x4x4,text:1", "SECONDS"),
            ("qwen2.5-omni", "text:1,video:1x2x2@1+audio:3,text:2,video:1x2x2@1,text:1",
             "every video"),
            ("qwen2.5-vl", "text:1,video:1x2x2@1+audio:3", "qwen2.5-omni only"),
            ("qwen2.5-omni", "text:1,video:1x2x2@1+audio:0", "1 to"),
            ("glm4v", "video:2x4x4/1,text:1", "start and end"),
            ("glm4v", "text:1,video:2x4x4,text:1", "GAP"),
            ("glm4v", "text:1,video:1x4x4@2,text:1", "seconds"),
            ("qwen2-vl", "text:99999999999", "1 to"),
            ("qwen2-vl", "image:2147483647x2147483646x2147483646", "tokens"),
            ("qwen2-vl", ",".join(["text:2000000000"] * 2), "tokens"),
            ("qwen3-vl", "text:1,video:2147483647x2x2/1,text:1", "tokens"),  # not expanded first
            ("qwen4", "text:1", "unknown family"),
        ]
        for family, spec, match in cases:
            with self.subTest(spec=spec):
                self.assert_fails(2, "rope-ids", "--family", family, "--layout", spec, "-o",
                                  out, match=match)
                self.assertFalse(os.path.exists(out))
        # Time ids past 2^53: 2^31-1 frames 2^31 apart.
        self.assert_fails(2, "rope-ids", "--family", "qwen2.5-vl", "--layout",
                          "text:1,video:4x2x2@1000000,text:1", "--tokens-per-second",
                          "4000000000000", "-o", out, match="2.53")
        self.assert_fails(2, "rope-ids", "--family", "qwen2-vl", "--layout", "text:1",
                          "--spatial-merge-size", 0, "-o", out, match="spatial-merge-size")
        self.assert_fails(2, "rope-ids", "--layout", "text:1", "-o", out, match="family")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_output_formats(self):
        spec = "text:2,image:1x2x4,text:1"
        ref = self.ids("qwen2-vl", spec)
        for name in ("ids.csv", "ids.json"):
            p = self.path(name)
            self.run_ok("rope-ids", "--family", "qwen2-vl", "--layout", spec, "-o", p)
            self.assertTrue(os.path.getsize(p) > 0)
        with open(self.path("ids.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["shape"], [3, 5])
        np.testing.assert_array_equal(np.array(doc["data"]).reshape(3, 5), ref)
        self.run_ok("rope-ids", "--family", "qwen2-vl", "--layout", spec, "-o",
                    self.path("f.h5"))
        with h5py.File(self.path("f.h5"), "r") as f:
            np.testing.assert_array_equal(f["position_ids"][()], ref)
            self.assertEqual(f["position_ids"].attrs["layout"], spec)


if __name__ == "__main__":
    unittest.main()
